package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/committer"
	"cellguard/internal/natsperm"
)

const partitionsUsage = `usage: cellguard partitions [list | set N] [flags]

  list      the staging stream's partition count, and which committer
            process consumes which partitions (default)
  set N     change the partition count to N (1..1024): committers create
            the new partitions' consumers within a discovery interval,
            drain the old ones while keeping every dataset's order, and
            delete them once drained; nothing staged is lost
`

// partitionsCmd shows and changes how staging is partitioned.
func partitionsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	verb := "list"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		verb, args = args[0], args[1:]
	}
	if verb == "help" {
		fmt.Fprint(stdout, partitionsUsage)
		return nil
	}
	fs := flag.NewFlagSet("partitions "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, partitionsUsage); fs.PrintDefaults() }
	var cf connFlags
	cf.register(fs, defaultClientURL)
	listen := fs.Duration("listen", 1500*time.Millisecond, "list: how long to listen for committer announcements")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	var n int
	switch {
	case verb == "list" && len(pos) == 0:
	case verb == "set" && len(pos) == 1:
		if n, err = strconv.Atoi(pos[0]); err != nil || n < 1 || n > committer.MaxPartitions {
			return usageError{fmt.Sprintf("partitions set: %q is not a partition count in 1..%d", pos[0], committer.MaxPartitions)}
		}
	default:
		return usageError{"partitions: want `list` or `set N` (cellguard partitions help)"}
	}
	nc, err := cf.connect("cellguard-partitions")
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, done := natsperm.For(nc).Guard(ctx, append([]string{cf.prefix + ".>"}, natsperm.JetStream...)...)
	return done(partitionsVerb(ctx, nc, cf.prefix, verb, n, *listen, stdout))
}

func partitionsVerb(ctx context.Context, nc *nats.Conn, prefix, verb string, n int, listen time.Duration, stdout io.Writer) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if verb == "set" {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := committer.SetPartitionCount(rctx, js, prefix, n); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "partition count set to %d; committers follow within a discovery interval\n", n)
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	count, err := committer.PartitionCount(rctx, js, prefix)
	if err != nil {
		return err
	}
	cs, err := committer.Committers(ctx, nc, prefix, listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "partitions: %d\n", count)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMMITTER\tHOST\tPID\tUP SINCE\tPARTITIONS\tPINNED\tLIST")
	owned := 0
	for _, c := range cs {
		owned += len(c.Partitions)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%s\n", c.ID, c.Host, c.PID, c.Since.Format(time.RFC3339), len(c.Partitions), c.Pinned, compactPartitions(c.Partitions))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(cs) == 0 {
		fmt.Fprintln(stdout, "no committer announced itself (none running, or fast takeover is off)")
	}
	return nil
}

// compactPartitions lists partition consumer names without their common
// prefix ("partition-64-3" → "64-3"), in numeric order of count, then
// index (16-2 before 16-10).
func compactPartitions(names []string) string {
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, strings.TrimPrefix(n, "partition-"))
	}
	key := func(p string) (n, k int, ok bool) {
		a, b, found := strings.Cut(p, "-")
		n, errN := strconv.Atoi(a)
		k, errK := strconv.Atoi(b)
		return n, k, found && errN == nil && errK == nil
	}
	slices.SortFunc(parts, func(x, y string) int {
		xn, xk, xok := key(x)
		yn, yk, yok := key(y)
		switch {
		case xok && yok:
			return cmp.Or(cmp.Compare(xn, yn), cmp.Compare(xk, yk))
		case xok != yok: // names of another form last
			if xok {
				return -1
			}
			return 1
		}
		return strings.Compare(x, y)
	})
	return strings.Join(parts, " ")
}
