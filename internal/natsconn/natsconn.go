// Package natsconn turns cellguard's connection settings (server URLs,
// a credentials file, TLS files) into nats.go options, the same way for
// every command, and keeps secrets out of what it prints: URLs are
// redacted before they reach a log line or an error.
//
//	c := natsconn.Config{URL: "tls://nats:4222", Creds: "committer.nk", TLSCA: "ca.pem"}
//	nc, err := c.Connect("cellguard-committer")
//
// A credentials file is either a NATS user credentials file (a user JWT
// and its nkey seed, for servers in operator mode) or a bare user nkey
// seed file (for servers whose accounts list nkey users, as
// deploy/nats/accounts.conf does).
//
// Replies (JetStream API answers, publish acknowledgements, pulled
// messages) come to a connection's inbox subjects. Each user has its own
// inbox prefix, _INBOX_<its public nkey> (InboxPrefix), and the shipped
// accounts let a user subscribe to its own prefix only: no credential can
// read the replies meant for another user. Connect with a credentials
// file uses it by itself; a program that dials with nats.go directly adds
// nats.CustomInboxPrefix(natsconn.InboxPrefix(pub)) (or InboxOption).
package natsconn

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// Config holds the connection settings.
type Config struct {
	URL     string // comma-separated server URLs
	Creds   string // credentials file: a user .creds (JWT + seed) or a user nkey seed
	TLSCert string // client certificate (with TLSKey) for servers that verify clients
	TLSKey  string
	TLSCA   string // CA bundle to verify the server
	// User and Password, or Token, authenticate where no credentials
	// file is used (a nats CLI context may carry them). They are never
	// printed.
	User, Password, Token string
	// InboxPrefix overrides the inbox prefix the credentials imply
	// (InboxPrefix of their public key); without credentials, the nats.go
	// default (_INBOX) unless set.
	InboxPrefix string
}

// InboxPrefix is the inbox prefix of the user with public nkey pub:
// "_INBOX_" + pub. The shipped accounts allow each user to subscribe to
// InboxPrefix(its key) + ".>" and to no other inbox.
func InboxPrefix(pub string) string { return "_INBOX_" + pub }

// CredsPublicKey returns the public user nkey of a credentials file (a
// .creds file or a bare nkey seed).
func CredsPublicKey(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%w: credentials: %w", ErrConfig, err)
	}
	defer clear(b)
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return "", fmt.Errorf("%w: credentials %s: not a .creds file nor an nkey seed", ErrConfig, path)
	}
	defer kp.Wipe()
	return kp.PublicKey()
}

// InboxOption is the nats.go option that sets the inbox prefix of the
// user whose credentials file is at path.
func InboxOption(path string) (nats.Option, error) {
	pub, err := CredsPublicKey(path)
	if err != nil {
		return nil, err
	}
	return nats.CustomInboxPrefix(InboxPrefix(pub)), nil
}

// ErrConfig marks settings that cannot work (a TLS key without its
// certificate, an unreadable credentials file).
var ErrConfig = errors.New("natsconn: bad connection settings")

// Options returns the nats.go options for the settings, after checking
// that they are complete.
func (c Config) Options() ([]nats.Option, error) {
	var opts []nats.Option
	if c.Creds != "" {
		o, err := credsOption(c.Creds)
		if err != nil {
			return nil, err
		}
		opts = append(opts, o)
		if c.InboxPrefix == "" {
			io, err := InboxOption(c.Creds)
			if err != nil {
				return nil, err
			}
			opts = append(opts, io)
		}
	}
	if c.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(c.InboxPrefix))
	}
	switch {
	case c.TLSCert != "" && c.TLSKey != "":
		opts = append(opts, nats.ClientCert(c.TLSCert, c.TLSKey))
	case c.TLSCert != "":
		return nil, fmt.Errorf("%w: --tls-cert %s needs --tls-key", ErrConfig, c.TLSCert)
	case c.TLSKey != "":
		return nil, fmt.Errorf("%w: --tls-key %s needs --tls-cert", ErrConfig, c.TLSKey)
	}
	if c.TLSCA != "" {
		opts = append(opts, nats.RootCAs(c.TLSCA))
	}
	if c.User != "" {
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	}
	if c.Token != "" {
		opts = append(opts, nats.Token(c.Token))
	}
	return opts, nil
}

// credsOption reads the file once to tell a JWT credentials file from a
// bare nkey seed; nats.go reads it again when it signs the server's nonce.
func credsOption(path string) (nats.Option, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: credentials: %w", ErrConfig, err)
	}
	defer clear(b)
	if bytes.Contains(b, []byte("BEGIN NATS USER JWT")) {
		return nats.UserCredentials(path), nil
	}
	o, err := nats.NkeyOptionFromSeed(path)
	if err != nil {
		return nil, fmt.Errorf("%w: credentials %s: not a .creds file nor an nkey seed", ErrConfig, path)
	}
	return o, nil
}

// Connect dials the servers with endless reconnects. Errors name the
// servers with any user information redacted.
func (c Config) Connect(name string, extra ...nats.Option) (*nats.Conn, error) {
	opts, err := c.Options()
	if err != nil {
		return nil, err
	}
	opts = append([]nats.Option{
		nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.Timeout(5 * time.Second),
	}, append(opts, extra...)...)
	nc, err := nats.Connect(c.URL, opts...)
	if err != nil {
		cerr := fmt.Errorf("connect %s: %s", Redact(c.URL), RedactText(err.Error(), c.URL))
		if errors.Is(err, nats.ErrAuthorization) || strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
			return nil, authError{cerr}
		}
		return nil, cerr
	}
	return nc, nil
}

// ErrAuthorization matches (errors.Is) a connection the server refused
// for its credentials: none, unknown ones, or a user it does not know.
var ErrAuthorization = errors.New("natsconn: authorization violation")

// authError is a refused connection: its text is Connect's redacted
// message, and it matches ErrAuthorization. (nats.go reports a refusal at
// connect time as the server's text, not as nats.ErrAuthorization.)
type authError struct{ error }

func (authError) Is(target error) bool { return target == ErrAuthorization }

// Loopback reports whether every server of the list is on this machine
// (127.0.0.1, ::1 or localhost) and no URL carries user information.
func Loopback(urls string) bool {
	for _, p := range strings.Split(urls, ",") {
		p = strings.TrimSpace(p)
		if !strings.Contains(p, "://") {
			p = "nats://" + p
		}
		u, err := url.Parse(p)
		if err != nil || u.User != nil {
			return false
		}
		switch u.Hostname() {
		case "127.0.0.1", "::1", "localhost":
		default:
			return false
		}
	}
	return true
}

// Transient reports whether err says the server or the connection is
// away for now (a restart, a lost or reconnecting connection, a request
// no server answered) rather than that the request is wrong or the
// connection closed for good: the caller may try again once it is back.
func Transient(err error) bool {
	for _, target := range []error{
		nats.ErrTimeout, nats.ErrNoResponders, nats.ErrNoServers, nats.ErrConnectionReconnecting, nats.ErrDisconnected,
		jetstream.ErrServerShutdown, jetstream.ErrNoHeartbeat,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
