package location

// versionsDir is where a Lance dataset keeps its manifests.
const versionsDir = "_versions/"

// LocalDir returns the local directory of a plain-path or file://
// location, "" for any other scheme; the directory need not exist.
func LocalDir(urlstr string) (string, error) {
	_, dir, err := bucketURL(urlstr, false)
	return dir, err
}
