// Package credgen generates the credentials a cellguard deployment runs
// with: a certificate authority with server and client certificates for
// NATS TLS (client and route connections, both verified), and nkey seed
// files, one per role, whose public keys the NATS accounts file names.
//
// The TLS material is for tests and evaluation: a real deployment brings
// its own CA. The nkeys are as good as any: a seed is the whole secret, is
// written with mode 0600 and never printed; the public key is not secret.
//
//	certs, err := credgen.TLS(dir, []string{"localhost", "127.0.0.1"}, []string{"committer"})
//	keys, err := credgen.Nkeys(dir, credgen.Roles)
package credgen

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nkeys"
)

// Roles are the NATS users of a cellguard deployment (see
// deploy/nats/accounts.conf): the committer decides, workers stage,
// readers read, admins create and delete datasets, and system is the
// server's system account user.
var Roles = []string{"committer", "worker", "reader", "admin", "system"}

// Certs names the PEM files TLS wrote.
type Certs struct {
	CA                string            // the CA certificate: every side's ca_file
	Server, ServerKey string            // the server certificate, also used for routes (server and client auth)
	Client, ClientKey map[string]string // per client name: certificate and key
	validFor          time.Duration
	caCert            *x509.Certificate
	caKey             *ecdsa.PrivateKey
}

// TLS writes a fresh CA (ca.pem, ca-key.pem), a server certificate valid
// for hosts (server.pem, server-key.pem; DNS names and IP addresses) and a
// client certificate per name (client-NAME.pem, client-NAME-key.pem) into
// dir. Keys are written with mode 0600.
func TLS(dir string, hosts, clients []string) (*Certs, error) {
	if len(hosts) == 0 {
		return nil, errors.New("credgen: no server host names")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("credgen: %w", err)
	}
	c := &Certs{Client: map[string]string{}, ClientKey: map[string]string{}, validFor: 2 * 365 * 24 * time.Hour}
	if err := c.writeCA(dir); err != nil {
		return nil, err
	}
	srv := &x509.Certificate{
		Subject: pkix.Name{CommonName: "cellguard-nats"},
		// Routes dial each other with the same certificate: both usages.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			srv.IPAddresses = append(srv.IPAddresses, ip)
		} else {
			srv.DNSNames = append(srv.DNSNames, h)
		}
	}
	var err error
	if c.Server, c.ServerKey, err = c.issue(dir, "server", srv); err != nil {
		return nil, err
	}
	for _, name := range clients {
		tmpl := &x509.Certificate{
			Subject:     pkix.Name{CommonName: name},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if c.Client[name], c.ClientKey[name], err = c.issue(dir, "client-"+name, tmpl); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Certs) writeCA(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("credgen: ca key: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "cellguard test CA"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	path, _, err := c.write(dir, "ca", tmpl, tmpl, key, key)
	if err != nil {
		return err
	}
	cert, err := x509.ParseCertificate(mustDER(path))
	if err != nil {
		return fmt.Errorf("credgen: ca: %w", err)
	}
	c.CA, c.caCert, c.caKey = path, cert, key
	return nil
}

// issue signs tmpl with the CA and writes NAME.pem and NAME-key.pem.
func (c *Certs) issue(dir, name string, tmpl *x509.Certificate) (string, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("credgen: %s key: %w", name, err)
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	return c.write(dir, name, tmpl, c.caCert, key, c.caKey)
}

func (c *Certs) write(dir, name string, tmpl, parent *x509.Certificate, key, signer *ecdsa.PrivateKey) (string, string, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return "", "", fmt.Errorf("credgen: serial: %w", err)
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(c.validFor)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		return "", "", fmt.Errorf("credgen: %s certificate: %w", name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", fmt.Errorf("credgen: %s key: %w", name, err)
	}
	certPath := filepath.Join(dir, name+".pem")
	keyPath := filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", fmt.Errorf("credgen: %w", err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", fmt.Errorf("credgen: %w", err)
	}
	return certPath, keyPath, nil
}

// mustDER reads back the certificate just written; a failure there is a
// failure of the write, reported by the parse that follows.
func mustDER(path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil
	}
	return blk.Bytes
}

// Nkey is one role's user nkey: the seed file (secret) and the public key.
type Nkey struct {
	SeedFile string
	Public   string
}

// Inbox is the subject pattern of the user's own replies,
// _INBOX_<public key>.>: the value of CELLGUARD_<ROLE>_INBOX, the only
// inbox the shipped accounts let the user subscribe to. The prefix is
// natsconn.InboxPrefix's (the one cellguard's clients use).
func (k Nkey) Inbox() string { return "_INBOX_" + k.Public + ".>" }

// Nkeys writes a fresh user nkey seed per role into dir as ROLE.nk (mode
// 0600) and returns the public keys. An existing seed file is kept and
// read, so a second call is idempotent.
func Nkeys(dir string, roles []string) (map[string]Nkey, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("credgen: %w", err)
	}
	out := map[string]Nkey{}
	for _, role := range roles {
		path := filepath.Join(dir, role+".nk")
		pub, err := ensureSeed(path)
		if err != nil {
			return nil, err
		}
		out[role] = Nkey{SeedFile: path, Public: pub}
	}
	return out, nil
}

func ensureSeed(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		kp, err := nkeys.ParseDecoratedNKey(b)
		if err != nil {
			return "", fmt.Errorf("credgen: %s: %w", path, err)
		}
		return kp.PublicKey()
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("credgen: %w", err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", fmt.Errorf("credgen: nkey: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return "", fmt.Errorf("credgen: nkey: %w", err)
	}
	// O_EXCL: never overwrite a seed another process wrote meanwhile.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("credgen: %w", err)
	}
	_, werr := f.Write(append(seed, '\n'))
	if err := errors.Join(werr, f.Close()); err != nil {
		return "", fmt.Errorf("credgen: %s: %w", path, err)
	}
	return kp.PublicKey()
}
