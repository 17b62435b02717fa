package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"cellguard/events"
	"cellguard/internal/natsperm"
)

// eventsCmd runs `cellguard events tail DATASET`.
func eventsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "tail" {
		return usageError{"events: want tail"}
	}
	fs := flag.NewFlagSet("events tail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf connFlags
	cf.register(fs, "nats://127.0.0.1:4222")
	from := fs.Uint64("from", 0, "first version to print (1: the whole history; 0: only new versions)")
	what := fs.String("show", "all", "what to print: all, versions or rejections")
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{"events tail: want one dataset name"}
	}
	ds := pos[0]
	if *what != "all" && *what != "versions" && *what != "rejections" {
		return usageError{"events tail: --show must be all, versions or rejections"}
	}
	nc, err := cf.connect("cellguard-events-tail")
	if err != nil {
		return err
	}
	defer nc.Close()
	t := &tailer{out: stdout}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ctx, done := natsperm.For(nc).Guard(ctx, append([]string{cf.prefix + ".>"}, natsperm.JetStream...)...)
	errs := make(chan error, 2)
	n := 0
	if *what != "rejections" {
		sub, err := events.NewSubscriber(nc, events.Config{Prefix: cf.prefix, Dataset: ds, From: *from})
		if err != nil {
			return usageError{err.Error()}
		}
		n++
		go func() { errs <- sub.Run(ctx, t.committed) }()
	}
	if *what != "versions" {
		rej, err := events.NewRejections(nc, events.RejectionsConfig{Prefix: cf.prefix, Dataset: ds, FromStart: *from == 1})
		if err != nil {
			return usageError{err.Error()}
		}
		n++
		go func() { errs <- rej.Run(ctx, t.rejected) }()
	}
	fmt.Fprintf(stderr, "tailing %s on %s (Ctrl-C to stop)\n", ds, cf.redactedURL())
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	return done(first)
}

// tailer prints both feeds, one line per event.
type tailer struct {
	mu  sync.Mutex
	out io.Writer
}

func (t *tailer) printf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, format, args...)
}

func (t *tailer) committed(_ context.Context, c *events.Committed) error {
	t.printf("%s  v%-6d %-16s txn %s read@%d  %s\n", stamp(c.Time), c.Version, c.Op, c.TxnID,
		c.Decision.GetReadVersion(), c.Summary)
	return nil
}

func (t *tailer) rejected(_ context.Context, r *events.Rejected) error {
	e := r.Err
	var b strings.Builder
	fmt.Fprintf(&b, "%s  REJECTED %-16s txn %s read@%d head@%d", stamp(r.Time), e.Reason, r.TxnID, e.ReadVersion, e.HeadVersion)
	if e.ConflictVersion > 0 {
		fmt.Fprintf(&b, "  conflicts with v%d (txn %s)", e.ConflictVersion, e.ConflictTxnID)
	}
	if len(e.Violations) == 0 && e.Message != "" {
		fmt.Fprintf(&b, "  %s", e.Message)
	}
	b.WriteByte('\n')
	const maxShown = 5
	for i, v := range e.Violations {
		if i == maxShown {
			fmt.Fprintf(&b, "      … %d more\n", len(e.Violations)-maxShown)
			break
		}
		fmt.Fprintf(&b, "      %s\n", v)
	}
	t.printf("%s", b.String())
	return nil
}

// stamp is when the log stored a record, in local time (now, when the
// read did not carry it): replayed history shows when it was decided.
func stamp(at time.Time) string {
	if at.IsZero() {
		at = time.Now()
	}
	return at.Local().Format("15:04:05.000")
}
