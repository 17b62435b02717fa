package credgen

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"

	"cellguard/internal/natsconn"
)

func TestTLSChainsToCA(t *testing.T) {
	c, err := TLS(t.TempDir(), []string{"n1", "127.0.0.1"}, []string{"worker"})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(c.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(caPEM)
	check := func(cert, key, host string, usage x509.ExtKeyUsage) {
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(kp.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: host, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("%s: %v", cert, err)
		}
		if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want 0600", key, fi.Mode(), err)
		}
	}
	check(c.Server, c.ServerKey, "n1", x509.ExtKeyUsageServerAuth)
	check(c.Server, c.ServerKey, "127.0.0.1", x509.ExtKeyUsageClientAuth) // routes dial with it
	check(c.Client["worker"], c.ClientKey["worker"], "", x509.ExtKeyUsageClientAuth)
}

func TestNkeysKeepExistingSeeds(t *testing.T) {
	dir := t.TempDir()
	a, err := Nkeys(dir, []string{"reader"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Nkeys(dir, []string{"reader"})
	if err != nil {
		t.Fatal(err)
	}
	if a["reader"].Public != b["reader"].Public || a["reader"].Public[0] != 'U' {
		t.Errorf("public keys %q then %q", a["reader"].Public, b["reader"].Public)
	}
	fi, err := os.Stat(a["reader"].SeedFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("seed mode %v (%v), want 0600", fi.Mode(), err)
	}
}

func TestInboxIsTheClientsPrefix(t *testing.T) {
	keys, err := Nkeys(t.TempDir(), []string{"worker"})
	if err != nil {
		t.Fatal(err)
	}
	k := keys["worker"]
	if want := natsconn.InboxPrefix(k.Public) + ".>"; k.Inbox() != want {
		t.Fatalf("Inbox() = %q, want %q", k.Inbox(), want)
	}
	pub, err := natsconn.CredsPublicKey(k.SeedFile)
	if err != nil || pub != k.Public {
		t.Fatalf("CredsPublicKey = %q, %v; want %q", pub, err, k.Public)
	}
}
