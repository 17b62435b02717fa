// Command cellguard is the one binary of the project: the committer
// service and the tools around it.
//
//	cellguard serve                      run the committer (embedded JetStream by default)
//	cellguard dataset create NAME ...    create a dataset (an Overwrite at read_version 0)
//	cellguard dataset adopt NAME ...     start a dataset from a Lance table LanceDB wrote (--location URL)
//	cellguard dataset list               list datasets and their head versions
//	cellguard dataset show NAME          show a dataset's head manifest
//	cellguard dataset log NAME           print a dataset's decision log
//	cellguard dataset delete NAME        delete a dataset (admin only; --force while it is staged to)
//	cellguard txn inspect FILE.txn       decode a Lance transaction file
//	cellguard bench                      measure the committer against raw JetStream
//	cellguard demo                       run workers, an updater and the committer; verify the data
//	cellguard events tail NAME           print a dataset's committed versions and rejections
//	cellguard partitions [set N]         show which committer consumes which partition; change the count
//
// main is the only place that reads flags and calls os.Exit.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"cellguard/internal/natsconn"

	_ "gocloud.dev/blob/s3blob" // s3:// dataset roots; the SDKs leave the choice of drivers to the program
)

// usageError is a command-line mistake; main prints usage for it.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go watchdog(ctx)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return
	}
	fmt.Fprintln(os.Stderr, "cellguard:", natsconn.RedactAll(err.Error()))
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	os.Exit(1)
}

// exitDeadline is how long the process may take to exit after SIGTERM or
// SIGINT, whatever it is doing.
const exitDeadline = 2 * time.Second

// watchdog ends the process exitDeadline after a signal if the command
// has not returned by then. Every command is safe to stop at any point
// (the committer as after a crash: its log is fenced and unacked work is
// redelivered); the commands normally return well within the deadline.
func watchdog(ctx context.Context) {
	<-ctx.Done()
	time.Sleep(exitDeadline)
	fmt.Fprintf(os.Stderr, "cellguard: still running %v after the signal; exiting\n", exitDeadline)
	os.Exit(1)
}

const usage = `usage: cellguard <command> [flags]

commands:
  serve                    run the committer (embedded JetStream unless --nats-url)
  dataset create NAME      create a dataset: --schema 'id:int64,x:double?' [--location URL] [--readers lance8|cellguard]
  dataset adopt NAME       start a dataset from the latest version of a Lance table: --location URL
  dataset list             list datasets with their head versions
  dataset show NAME        show the head manifest of a dataset
  dataset log NAME         print the decision log of a dataset
  dataset delete NAME      delete a dataset (admin only): [--force] [--purge-data]
  dataset verify NAME      check the decision log against the published Lance table (exit 1 if they differ)
  dataset repair NAME      bring a log that fell behind its published table forward (committer only)
  txn inspect FILE.txn     decode a Lance transaction file and print it
  bench                    benchmark the committer beside raw JetStream
  demo                     run the whole pipeline on an embedded server and verify it
  events tail DATASET      print committed versions and rejections as they happen
  partitions [set N]       show which committer consumes which partition; change the count
  version                  print the version (also --version)

Connection flags of every command that talks to NATS, as in the nats CLI:
  -s, --server URL         servers (env NATS_URL; --nats-url, CELLGUARD_NATS_URL)
  --creds FILE             a user .creds file or an nkey seed file
  --context NAME           a nats CLI context (~/.config/nats/context/NAME.json)
  --tlscert, --tlskey, --tlsca   client TLS (also --tls-cert, --tls-key, --tls-ca)

Run 'cellguard <command> -h' for the flags of a command.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{"no command"}
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stderr)
	case "dataset":
		if len(args) < 2 {
			return usageError{"dataset: want a verb: create, adopt, list, show, log, delete, verify or repair (cellguard dataset -h)"}
		}
		return dataset(ctx, args[1], args[2:], stdout, stderr)
	case "txn":
		if len(args) < 2 || args[1] != "inspect" {
			return usageError{"txn: want inspect"}
		}
		return txnInspect(args[2:], stdout, stderr)
	case "bench":
		return benchCmd(ctx, args[1:], stdout, stderr)
	case "demo":
		return demoCmd(ctx, args[1:], stdout, stderr)
	case "events":
		return eventsCmd(ctx, args[1:], stdout, stderr)
	case "partitions":
		return partitionsCmd(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	case "version", "--version", "-v":
		ver, rev, gov := buildVersion()
		fmt.Fprintf(stdout, "cellguard %s (revision %s, %s)\n", ver, rev, gov)
		return nil
	}
	return usageError{fmt.Sprintf("unknown command %q", args[0])}
}
