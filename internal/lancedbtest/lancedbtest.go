// Package lancedbtest runs real LanceDB (the `@lancedb/lancedb` npm package)
// from Go tests, in two releases side by side — 0.31.0 (Lance 8) and 0.39.0
// (Lance 12), each pinned by the package.json and package-lock.json in
// lance8/ and lance12/ beside this file — so that Lance itself judges
// whether what cellguard writes is Lance and whether cellguard reads what
// Lance writes. Each runs a check once per judge.
//
// The first Run of a judge in a machine installs its pinned packages into a
// cache directory keyed by its package and lock files' hash
// (os.UserCacheDir()/cellguard/lancedb-<hash>, or under $CELLGUARD_LANCEDB_DIR
// if set). Later runs, in this or any other test process, reuse it. The install
// goes into a temporary sibling directory that is renamed into place when
// complete, so two test processes racing to install never see half an
// install.
//
// Node 20 or newer and npm must be on PATH. Without them the test fails
// (never skips) and says how to install Node.
//
// A script is the source of an ES module. It reads its input as JSON from
// stdin and writes its result as JSON to stdout; whatever it writes to
// stderr is shown when it fails:
//
//	const input = JSON.parse(await readStdin());
//	const db = await lancedb.connect(input.dir);
//	...
//	process.stdout.write(JSON.stringify(result));
//
// ReadStdin in Prelude is a helper scripts can use (callers prepend
// Prelude).
package lancedbtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Version is one pinned LanceDB release that judges cellguard's Lance
// compatibility. Each is installed from its own package.json and lock file
// (in lance8/ and lance12/ beside this file) into its own cache directory.
type Version struct {
	// Name is a short label for subtests: "lance8", "lance12".
	Name string
	// LanceDB is the @lancedb/lancedb version; Lance the Lance release inside it.
	LanceDB, Lance string

	packageJSON, packageLock []byte
	// ci installs with `npm ci`; otherwise `npm install`, which honours the
	// lock file too but tolerates a lock that records only this platform's
	// optional native build (0.39's other platforms' builds are not served
	// by the registry reached here, so its lock cannot list them).
	ci bool

	inst *installation
}

type installation struct {
	once sync.Once
	dir  string
	err  error
}

//go:embed lance8/package.json
var lance8Package []byte

//go:embed lance8/package-lock.json
var lance8Lock []byte

//go:embed lance12/package.json
var lance12Package []byte

//go:embed lance12/package-lock.json
var lance12Lock []byte

// The two judges: Lance8 is the oldest release cellguard supports, Lance12
// the one people install today.
var (
	Lance8  = Version{Name: "lance8", LanceDB: "0.31.0", Lance: "8.0.0", packageJSON: lance8Package, packageLock: lance8Lock, ci: true, inst: new(installation)}
	Lance12 = Version{Name: "lance12", LanceDB: "0.39.0", Lance: "12.0.0", packageJSON: lance12Package, packageLock: lance12Lock, inst: new(installation)}
)

// Versions lists every judge, oldest first.
var Versions = []Version{Lance8, Lance12}

// LanceDBVersion is the oldest judge's @lancedb/lancedb version, the one the
// package-level Run, RunErr and Dir use.
const LanceDBVersion = "0.31.0"

// String is the subtest label, e.g. "lance12".
func (v Version) String() string { return v.Name }

// Each runs f once per judge, as subtests named for the judge.
func Each(t *testing.T, f func(t *testing.T, v Version)) {
	t.Helper()
	for _, v := range Versions {
		t.Run(v.Name, func(t *testing.T) { f(t, v) })
	}
}

// Prelude is JavaScript that scripts may start with: it imports lancedb and
// apache-arrow and defines readStdin().
const Prelude = `import * as lancedb from "@lancedb/lancedb";
import * as arrow from "apache-arrow";
async function readStdin() {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  return Buffer.concat(chunks).toString("utf8");
}
`

const installHelp = "lancedbtest: real LanceDB is the judge of Lance compatibility and needs Node.js 20+ with npm on PATH. " +
	"Install Node 20, e.g. `curl -fsSL https://deb.nodesource.com/setup_20.x | sudo bash - && sudo apt-get install -y nodejs` " +
	"(Debian/Ubuntu), `brew install node@20` (macOS), or from https://nodejs.org/"

// Dir returns the directory holding node_modules with the pinned LanceDB,
// installing it first if needed. It fails the test if Node or npm is
// missing or the install fails.
func Dir(t testing.TB) string { t.Helper(); return Lance8.Dir(t) }

// Run is Lance8.Run.
func Run(t testing.TB, script string, input, out any) { t.Helper(); Lance8.Run(t, script, input, out) }

// RunErr is Lance8.RunErr.
func RunErr(t testing.TB, script string, input any) ([]byte, error) {
	t.Helper()
	return Lance8.RunErr(t, script, input)
}

// Dir returns the directory holding node_modules with this judge,
// installing it first if needed. It fails the test if Node or npm is
// missing or the install fails.
func (v Version) Dir(t testing.TB) string {
	t.Helper()
	dir, err := v.Install()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// Install is Dir for code outside tests (benchmark drivers): it returns
// the directory holding node_modules with this judge, installing it into
// the cache first if needed, or why it cannot.
func (v Version) Install() (string, error) {
	v.inst.once.Do(func() { v.inst.dir, v.inst.err = v.install() })
	return v.inst.dir, v.inst.err
}

// Run runs script, the source of an ES module, with Node in a fresh
// temporary directory that resolves `@lancedb/lancedb` and `apache-arrow`
// to this judge's install. input is marshalled to JSON on the script's stdin
// (nil sends `null`); the script's stdout is unmarshalled into out unless
// out is nil. A non-zero exit, or stdout that is not JSON, fails the test
// with the script's stderr.
func (v Version) Run(t testing.TB, script string, input, out any) {
	t.Helper()
	stdout, err := v.RunErr(t, script, input)
	if err != nil {
		t.Fatal(err)
	}
	if out == nil {
		return
	}
	if err := json.Unmarshal(stdout, out); err != nil {
		t.Fatalf("lancedbtest: decode script output: %v\nstdout: %s", err, truncate(stdout))
	}
}

// RunErr is Run without decoding: it returns the script's stdout, or an
// error carrying its stderr when it exits non-zero. Use it when a test
// expects LanceDB to refuse something.
func (v Version) RunErr(t testing.TB, script string, input any) ([]byte, error) {
	t.Helper()
	v.Dir(t) // installs, or fails the test saying why
	out, err := v.Exec(context.Background(), t.TempDir(), script, input)
	var se *ScriptError
	if err != nil && !errors.As(err, &se) {
		t.Fatal(err)
	}
	return out, err
}

// Exec is RunErr for code outside tests: it runs script with Node in work
// (an empty directory the caller owns and removes) until it exits or ctx
// ends. A script that exits unsuccessfully is a *ScriptError; any other
// error is trouble installing or starting it.
func (v Version) Exec(ctx context.Context, work, script string, input any) ([]byte, error) {
	dir, err := v.Install()
	if err != nil {
		return nil, err
	}
	if err := os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(work, "node_modules")); err != nil {
		return nil, fmt.Errorf("lancedbtest: link node_modules: %w", err)
	}
	path := filepath.Join(work, "script.mjs")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		return nil, fmt.Errorf("lancedbtest: write script: %w", err)
	}
	in, err := json.Marshal(input)
	if err != nil {
		return nil, fmt.Errorf("lancedbtest: encode input: %w", err)
	}
	// LanceDB leaves empty temporary directories behind; in work they
	// go with it.
	tmp := filepath.Join(work, "tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("lancedbtest: temporary directory: %w", err)
	}
	cmd := exec.CommandContext(ctx, "node", path)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), &ScriptError{Err: err, Stderr: stderr.String()}
	}
	return stdout.Bytes(), nil
}

// ScriptError is a script that exited unsuccessfully.
type ScriptError struct {
	Err    error
	Stderr string
}

func (e *ScriptError) Error() string {
	return fmt.Sprintf("lancedbtest: node script failed: %v\nstderr:\n%s", e.Err, truncate([]byte(e.Stderr)))
}

func (e *ScriptError) Unwrap() error { return e.Err }

func truncate(b []byte) string {
	const max = 8 << 10
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}

// install makes sure the pinned packages are installed and returns their
// directory.
func (v Version) install() (string, error) {
	if err := checkNode(); err != nil {
		return "", err
	}
	root, err := cacheRoot()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(append(append([]byte{}, v.packageJSON...), v.packageLock...))
	dir := filepath.Join(root, "lancedb-"+hex.EncodeToString(sum[:8]))
	if installed(dir) {
		return dir, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("lancedbtest: %w", err)
	}
	tmp, err := os.MkdirTemp(root, ".lancedb-install-")
	if err != nil {
		return "", fmt.Errorf("lancedbtest: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if err := v.npmInstall(tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil && !installed(dir) {
		return "", fmt.Errorf("lancedbtest: move install into place: %w", err)
	}
	return dir, nil
}

func cacheRoot() (string, error) {
	if d := os.Getenv("CELLGUARD_LANCEDB_DIR"); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("lancedbtest: no cache directory (set CELLGUARD_LANCEDB_DIR): %w", err)
	}
	return filepath.Join(base, "cellguard"), nil
}

// installed reports whether dir holds a complete install. A directory only
// ever appears under its final name after npm succeeded.
func installed(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "node_modules", "@lancedb", "lancedb", "package.json"))
	return err == nil
}

func (v Version) npmInstall(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "package.json"), v.packageJSON, 0o644); err != nil {
		return fmt.Errorf("lancedbtest: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "package-lock.json"), v.packageLock, 0o644); err != nil {
		return fmt.Errorf("lancedbtest: %w", err)
	}
	verb := "install"
	if v.ci {
		verb = "ci"
	}
	cmd := exec.Command("npm", verb, "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("lancedbtest: npm %s (@lancedb/lancedb %s) failed: %v\n%s", verb, v.LanceDB, err, truncate(out))
	}
	if !installed(dir) {
		return fmt.Errorf("lancedbtest: npm %s (@lancedb/lancedb %s) installed no @lancedb/lancedb\n%s", verb, v.LanceDB, truncate(out))
	}
	return nil
}

// checkNode fails unless node (version 20 or newer) and npm are on PATH.
func checkNode() error {
	if _, err := exec.LookPath("npm"); err != nil {
		return errors.New(installHelp + " (npm not found)")
	}
	if _, err := exec.LookPath("node"); err != nil {
		return errors.New(installHelp + " (node not found)")
	}
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		return fmt.Errorf("%s (node --version: %v)", installHelp, err)
	}
	v := strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
	var major int
	if _, err := fmt.Sscanf(v, "%d", &major); err != nil || major < 20 {
		return fmt.Errorf("%s (found node %s)", installHelp, strings.TrimSpace(string(out)))
	}
	return nil
}
