package main

import (
	"context"
	"errors"
	"flag"
	"io"

	"cellguard/internal/demo"
)

// demoCmd reads the flags of `cellguard demo` into demo.Options and runs
// it.
func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := demo.Defaults()
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "keep the NATS store and the dataset files here (default: a temporary directory, removed at the end)")
	fs.StringVar(&cfg.LanceRoot, "lance-root", cfg.LanceRoot, "publish the demo's table as the Lance directory DIR/demo.lance, kept at exit (default: a new temporary directory, kept)")
	fs.IntVar(&cfg.Fragments, "fragments", cfg.Fragments, "fragments of the table")
	fs.IntVar(&cfg.Rows, "rows", cfg.Rows, "rows per fragment")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "workers computing y = f(x)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long the updater keeps changing x")
	fs.DurationVar(&cfg.UpdateEvery, "update-every", cfg.UpdateEvery, "pause between the updater's transactions")
	fs.DurationVar(&cfg.WorkTime, "work-time", cfg.WorkTime, "simulated compute time of y for one fragment (the window in which x can change under a worker)")
	fs.DurationVar(&cfg.Settle, "settle", cfg.Settle, "how long the workers may take to catch up once the updater stops")
	fs.BoolVar(&cfg.Crash, "crash-worker", cfg.Crash, "crash worker 1 mid-run while it holds a rejection, then restart it")
	fs.BoolVar(&cfg.Unsafe, "no-preconditions", cfg.Unsafe, "stage y without preconditions, to see what verification then finds (exits non-zero)")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "random seed (0: from the clock)")
	fs.BoolVar(&cfg.Quiet, "quiet", cfg.Quiet, "print only the summary")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{"demo takes no arguments"}
	}
	err := demo.Run(ctx, cfg, stdout)
	if oe := (*demo.OptionError)(nil); errors.As(err, &oe) {
		return usageError{oe.Error()}
	}
	return err
}
