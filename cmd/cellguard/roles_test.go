package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"cellguard/internal/natsperm"
	"cellguard/internal/natstest"
)

// roleCommands are the CLI verbs of the role table in deploy/README.md.
var roleCommands = []struct {
	name string
	args []string // after the connection flags are added
	tail bool     // runs until cancelled: ok once it printed the first version
}{
	{"dataset create", []string{"dataset", "create", "ROLEDS", "--schema", "id:int64"}, false},
	{"dataset list", []string{"dataset", "list"}, false},
	{"dataset show", []string{"dataset", "show", "orders"}, false},
	{"dataset log", []string{"dataset", "log", "orders"}, false},
	{"events tail", []string{"events", "tail", "--from", "1", "orders"}, true},
	{"partitions", []string{"partitions", "--listen", "700ms"}, false},
	{"partitions set 64", []string{"partitions", "set", "64"}, false}, // the count it has: changes nothing
	// Last: the admin deletes "doomed" (the other roles are refused).
	{"dataset delete --force", []string{"dataset", "delete", "doomed", "--force"}, false},
}

var tableRoles = []string{"committer", "worker", "reader", "admin"}

// TestRoleTable runs every read and write verb of the CLI as every role
// of deploy/nats/accounts.conf and checks the outcome against the table
// in deploy/README.md: a refusal is an ErrPermission that comes at once
// (the verb's own deadline has not passed), never a hang.
func TestRoleTable(t *testing.T) {
	roles := natstest.RunWithAccounts(t, "../../deploy/nats/accounts.conf")
	runCommitter(t, roles)
	url := roles.Server.ClientURL()
	if err := cli(t, context.Background(), "dataset", "create", "orders", "--schema", "id:int64", "--nats-url", url, "--creds", roles.Keys["worker"].SeedFile); err != nil {
		t.Fatal(err)
	}
	if err := cli(t, context.Background(), "dataset", "create", "doomed", "--schema", "id:int64", "--nats-url", url, "--creds", roles.Keys["admin"].SeedFile); err != nil {
		t.Fatal(err)
	}

	var table strings.Builder
	table.WriteString("| command | " + strings.Join(tableRoles, " | ") + " |\n|---|" + strings.Repeat("---|", len(tableRoles)) + "\n")
	for _, c := range roleCommands {
		table.WriteString("| `" + c.name + "` |")
		for _, role := range tableRoles {
			args := append([]string{}, c.args...)
			for i, a := range args {
				args[i] = strings.ReplaceAll(a, "ROLEDS", "by-"+role)
			}
			args = append(args, "--nats-url", url, "--creds", roles.Keys[role].SeedFile)
			table.WriteString(" " + runAs(t, role, c.tail, args) + " |")
		}
		table.WriteString("\n")
	}
	readme, err := os.ReadFile("../../deploy/README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), table.String()) {
		t.Errorf("deploy/README.md does not hold the role table the CLI gives:\n%s", table.String())
	}
}

// runAs runs one verb and says "ok" or "refused"; anything else fails.
func runAs(t *testing.T, role string, tail bool, args []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out syncBuffer
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, args, &out, io.Discard) }()
	if tail {
		for !strings.Contains(out.String(), "v1 ") {
			select {
			case err := <-errc:
				errc <- err
			case <-time.After(20 * time.Millisecond):
				if ctx.Err() != nil {
					t.Fatalf("%s: %v printed nothing: %s", role, args, out.String())
				}
				continue
			}
			break
		}
		cancel()
	}
	err := <-errc
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, natsperm.ErrPermission) && (tail || ctx.Err() == nil):
		return "refused"
	}
	t.Errorf("%s: cellguard %s: %v", role, strings.Join(args, " "), err)
	return fmt.Sprintf("error: %v", err)
}

func cli(t *testing.T, ctx context.Context, args ...string) error {
	t.Helper()
	var out bytes.Buffer
	return run(ctx, args, &out, io.Discard)
}
