// Package deploy holds the deployment files (NATS configs, compose,
// Kubernetes, alerts, dashboards). Its Go side is small: it embeds the
// NATS accounts file, so that the embedded server of `cellguard serve`
// runs the very role model a cluster does, and its tests start the
// shipped configs as a real cluster on loopback.
package deploy

import (
	_ "embed"
	"fmt"
	"strings"

	"cellguard/internal/natsconn"
)

//go:embed nats/accounts.conf
var accountsConf string

// Accounts returns nats/accounts.conf with each role's public nkey
// (CELLGUARD_<ROLE>_NKEY) and its own inbox subjects
// (CELLGUARD_<ROLE>_INBOX: _INBOX_<public key>.>) written in place of
// their environment references. Every role the file references must be
// given.
func Accounts(publicKeys map[string]string) (string, error) {
	out := accountsConf
	for role, key := range publicKeys {
		out = strings.ReplaceAll(out, "$CELLGUARD_"+strings.ToUpper(role)+"_NKEY", fmt.Sprintf("%q", key))
		out = strings.ReplaceAll(out, "$CELLGUARD_"+strings.ToUpper(role)+"_INBOX", fmt.Sprintf("%q", natsconn.InboxPrefix(key)+".>"))
	}
	if i := strings.Index(out, "$CELLGUARD_"); i >= 0 {
		end := strings.IndexAny(out[i:], " \n\t")
		return "", fmt.Errorf("deploy: accounts: no key for %s", out[i:i+end])
	}
	return out, nil
}
