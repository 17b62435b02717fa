// Command certs writes the credentials of a local or test cellguard
// deployment (run it as `make certs`, or `go run ./internal/tools/certs
// DIR [HOSTS]` with HOSTS the servers' comma-separated DNS names and IPs):
//
//	DIR/tls/      ca.pem, server.pem + server-key.pem (client and route TLS),
//	              client-ROLE.pem + client-ROLE-key.pem per role
//	DIR/nkeys/    ROLE.nk, one user nkey seed per role (mode 0600)
//	DIR/nkeys.env CELLGUARD_ROLE_NKEY=<public key> and CELLGUARD_ROLE_INBOX=<its inbox subjects> lines for the NATS servers
//
// The CA is a throw-away test CA; bring your own in production. Seeds are
// never printed: only file paths and public keys are.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"cellguard/internal/credgen"
)

const defaultHosts = "localhost,127.0.0.1,n1,n2,n3,nats,*.nats,*.nats-headless,*.nats-headless.default.svc.cluster.local"

func main() {
	dir, hosts := "deploy/secrets", defaultHosts
	switch len(os.Args) {
	case 3:
		hosts = os.Args[2]
		fallthrough
	case 2:
		dir = os.Args[1]
	case 1:
	default:
		fmt.Fprintln(os.Stderr, "usage: certs [DIR [HOSTS]]")
		os.Exit(2)
	}
	if err := run(dir, strings.Split(hosts, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "certs:", err)
		os.Exit(1)
	}
}

func run(dir string, hosts []string) error {
	clients := slices.DeleteFunc(slices.Clone(credgen.Roles), func(r string) bool { return r == "system" })
	certs, err := credgen.TLS(filepath.Join(dir, "tls"), hosts, clients)
	if err != nil {
		return err
	}
	keys, err := credgen.Nkeys(filepath.Join(dir, "nkeys"), credgen.Roles)
	if err != nil {
		return err
	}
	var env strings.Builder
	for _, role := range credgen.Roles {
		fmt.Fprintf(&env, "CELLGUARD_%s_NKEY=%s\n", strings.ToUpper(role), keys[role].Public)
		if role != "system" {
			fmt.Fprintf(&env, "CELLGUARD_%s_INBOX=%s\n", strings.ToUpper(role), keys[role].Inbox())
		}
	}
	envFile := filepath.Join(dir, "nkeys.env")
	if err := os.WriteFile(envFile, []byte(env.String()), 0o644); err != nil {
		return err
	}
	fmt.Printf("CA          %s\nserver      %s\nnkey seeds  %s\npublic keys %s\n",
		certs.CA, certs.Server, filepath.Join(dir, "nkeys"), envFile)
	return nil
}
