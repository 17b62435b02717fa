package embedded

import "testing"

func TestParseSync(t *testing.T) {
	for in, want := range map[string]string{"always": "always", "2m": "2m0s", "500ms": "500ms"} {
		p, err := ParseSync(in)
		if err != nil || p.String() != want {
			t.Errorf("ParseSync(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for _, bad := range []string{"", "never", "0s", "-1m", "Always"} {
		if _, err := ParseSync(bad); err == nil {
			t.Errorf("ParseSync(%q): no error", bad)
		}
	}
}
