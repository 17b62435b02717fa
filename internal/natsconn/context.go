package natsconn

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// natsContext is the part of a nats CLI context file (JSON, in
// ~/.config/nats/context/NAME.json) that says how to connect.
type natsContext struct {
	URL      string `json:"url"`
	Creds    string `json:"creds"`
	Nkey     string `json:"nkey"`
	Cert     string `json:"cert"`
	Key      string `json:"key"`
	CA       string `json:"ca"`
	User     string `json:"user"`
	Password string `json:"password"`
	Token    string `json:"token"`
	Inbox    string `json:"inbox_prefix"`
}

// LoadContext reads a nats CLI context: name is a context name (looked up
// in $XDG_CONFIG_HOME/nats/context, default ~/.config/nats/context) or the
// path of a .json file. Its credentials file or nkey seed becomes Creds.
func LoadContext(name string) (Config, error) {
	path := name
	if !strings.HasSuffix(name, ".json") && !strings.ContainsRune(name, filepath.Separator) {
		dir := os.Getenv("XDG_CONFIG_HOME")
		if dir == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return Config{}, fmt.Errorf("%w: context %s: %w", ErrConfig, name, err)
			}
			dir = filepath.Join(home, ".config")
		}
		path = filepath.Join(dir, "nats", "context", name+".json")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("%w: context %s: %w", ErrConfig, name, err)
	}
	var c natsContext
	if err := json.Unmarshal(b, &c); err != nil {
		return Config{}, fmt.Errorf("%w: context %s: %w", ErrConfig, path, err)
	}
	creds := c.Creds
	if creds == "" {
		creds = c.Nkey
	}
	return Config{
		URL: c.URL, Creds: expandHome(creds), TLSCert: expandHome(c.Cert), TLSKey: expandHome(c.Key), TLSCA: expandHome(c.CA),
		User: c.User, Password: c.Password, Token: c.Token, InboxPrefix: c.Inbox,
	}, nil
}

// expandHome expands a leading "~/", as the nats CLI does for its paths.
func expandHome(p string) string {
	rest, ok := strings.CutPrefix(p, "~/")
	if !ok {
		return p
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return p
	}
	return filepath.Join(home, rest)
}
