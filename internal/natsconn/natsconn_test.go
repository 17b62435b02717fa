package natsconn

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cellguard/internal/credgen"
)

func TestRedact(t *testing.T) {
	cases := map[string]string{
		"nats://127.0.0.1:4222":                   "nats://127.0.0.1:4222",
		"nats://committer:s3cret@n1:4222":         "nats://committer:xxxxx@n1:4222",
		"nats://tok3n@n1:4222":                    "nats://xxxxx@n1:4222",
		"nats://a:p1@n1:4222, tls://b:p2@n2:4222": "nats://a:xxxxx@n1:4222,tls://b:xxxxx@n2:4222",
		"n1:4222":                           "n1:4222",
		"u:p%zz@n1:4222":                    "xxxxx@n1:4222",
		"nats://a:" + "p%40ss" + "@n1:4222": "nats://a:xxxxx@n1:4222",
	}
	for in, want := range cases {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
	text := RedactText("dial nats://a:p@ss@x failed: p@ss", "nats://a:p%40ss@n1:4222")
	if strings.Contains(text, "p@ss") {
		t.Errorf("RedactText left the password: %q", text)
	}
}

func TestOptionsChecksTLSPairs(t *testing.T) {
	for _, c := range []Config{{TLSKey: "k.pem"}, {TLSCert: "c.pem"}} {
		if _, err := c.Options(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: err %v, want ErrConfig", c, err)
		}
	}
	_, err := Config{TLSKey: "k.pem"}.Options()
	if err == nil || !strings.Contains(err.Error(), "needs --tls-cert") {
		t.Errorf("err %v does not say what is missing", err)
	}
}

func TestCredsFiles(t *testing.T) {
	dir := t.TempDir()
	keys, err := credgen.Nkeys(dir, []string{"worker"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (Config{Creds: keys["worker"].SeedFile}).Options(); err != nil {
		t.Errorf("nkey seed file: %v", err)
	}
	junk := filepath.Join(dir, "junk")
	if err := os.WriteFile(junk, []byte("not a seed"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{junk, filepath.Join(dir, "missing")} {
		if _, err := (Config{Creds: f}).Options(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err %v, want ErrConfig", f, err)
		}
	}
}

func TestRedactAll(t *testing.T) {
	seed := "SUAGMJH5XLGZKQQWAWKRZJIGMOU4HPFUYLXJMXOO5NLFEO2OOQJ5LPRDPM"
	in := "connect nats://committer:s3cret@n1:4222 and tls://tok@n2:4222 failed; seed " + seed
	got := RedactAll(in)
	for _, secret := range []string{"s3cret", "tok@", seed} {
		if strings.Contains(got, secret) {
			t.Errorf("RedactAll left %q: %s", secret, got)
		}
	}
	if !strings.Contains(got, "nats://committer:xxxxx@n1:4222") {
		t.Errorf("RedactAll lost the user name or host: %s", got)
	}
}

func TestRedactingHandler(t *testing.T) {
	var b strings.Builder
	log := slog.New(RedactingHandler(slog.NewTextHandler(&b, nil))).With("url", "nats://u:p4ss@h:1")
	log.Info("dial nats://u:p4ss@h:1", "err", errors.New("bad nats://u:p4ss@h:1"), slog.Group("g", "u", "nats://u:p4ss@h:1"))
	if strings.Contains(b.String(), "p4ss") {
		t.Errorf("logged a password: %s", b.String())
	}
}
