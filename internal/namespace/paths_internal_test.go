package namespace

import "testing"

func TestObjectPath(t *testing.T) {
	for _, c := range []struct{ loc, want string }{
		{"/data/root/t.lance", "data/root/t.lance/_versions/x"},
		{"file:///data/root/t.lance", "data/root/t.lance/_versions/x"},
		{"s3://bucket/tables/t.lance?region=eu-west-1", "tables/t.lance/_versions/x"},
	} {
		if got := objectPath(c.loc, "_versions/x"); got != c.want {
			t.Errorf("objectPath(%q) = %q, want %q", c.loc, got, c.want)
		}
	}
	if got := clientLocation("file:///data/t.lance"); got != "/data/t.lance" {
		t.Errorf("clientLocation(file) = %q", got)
	}
}

func TestStagedKey(t *testing.T) {
	const loc = "/r/t.lance"
	good := "r/t.lance/_versions/18446744073709551613.manifest-2d27"
	if key, e := stagedKey(loc, good, 2); e != nil || key != "_versions/18446744073709551613.manifest-2d27" {
		t.Errorf("stagedKey(good) = %q, %v", key, e)
	}
	for _, bad := range []string{
		"r/t.lance/_versions/18446744073709551613.manifest",       // final name, not staged
		"r/t.lance/_versions/18446744073709551614.manifest-2d27",  // version 1
		"r/u.lance/_versions/18446744073709551613.manifest-2d27",  // another table
		"r/t.lance/_versions/../x/18446744073709551613.manifest-", // escapes
		"r/t.lance/_versions/sub/18446744073709551613.manifest-a", // subdirectory
	} {
		if _, e := stagedKey(loc, bad, 2); e == nil || e.Code != CodeInvalidInput {
			t.Errorf("stagedKey(%q) = %v, want InvalidInput", bad, e)
		}
	}
}
