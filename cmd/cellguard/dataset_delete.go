package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/committer"
	"cellguard/internal/declog"
	"cellguard/internal/drop"
	"cellguard/internal/subject"
)

// deleteOpts are the flags of `dataset delete`.
type deleteOpts struct {
	force, purgeData bool
	quiet            time.Duration
}

func (o *deleteOpts) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.force, "force", false, "delete even while the dataset is staged to (its staged transactions are rejected with DATASET_DELETED)")
	fs.DurationVar(&o.quiet, "quiet", drop.DefaultQuiet, "without --force, refuse when the dataset's last decision is younger than this (0: only staged messages count)")
	fs.BoolVar(&o.purgeData, "purge-data", false, "also delete every file of the dataset's published Lance directory (default: leave it)")
}

// datasetDelete appends the dataset's tombstone (internal/drop) and says
// what it did. Only the admin role may: the others are refused by the
// server, at once, with an error matching natsperm.ErrPermission.
func datasetDelete(ctx context.Context, nc *nats.Conn, prefix, name string, o deleteOpts, stdout io.Writer) error {
	sc, err := subject.NewScheme(prefix)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	dl, err := declog.Open(ctx, js, sc, declog.Options{RequestTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	quiet := o.quiet
	if quiet == 0 {
		quiet = -1 // drop.Options: 0 is the default, negative is "any age"
	}
	res, err := drop.Dataset(ctx, js, dl, name, drop.Options{
		Force: o.force, Quiet: quiet, PurgeData: o.purgeData, Note: "cellguard dataset delete",
	})
	var busy *drop.BusyError
	switch {
	case errors.As(err, &busy):
		return fmt.Errorf("dataset %s not deleted: it is being staged to (%d undecided staged message(s), last decision %s ago, quiet period %s); stop its workers or use --force",
			name, busy.Staged, busy.LastDecision.Round(time.Second), busy.Quiet)
	case errors.Is(err, drop.ErrNoDataset):
		return fmt.Errorf("dataset %s: %w", name, errNoSuchDataset)
	case err != nil:
		return err
	}
	if res.Already {
		fmt.Fprintf(stdout, "dataset %s was already deleted (tombstone at log sequence %d, head v%d)\n", name, res.Seq, res.Head)
	} else {
		fmt.Fprintf(stdout, "dataset %s deleted at head v%d (tombstone at log sequence %d); %d staged transaction(s) will be rejected with DATASET_DELETED\n",
			name, res.Head, res.Seq, res.Staged)
	}
	switch {
	case res.Location == "":
	case o.purgeData:
		fmt.Fprintf(stdout, "purged %d file(s) from %s\n", res.Purged, res.Location)
	default:
		fmt.Fprintf(stdout, "the published Lance directory %s is left in place (--purge-data deletes it)\n", res.Location)
	}
	return nil
}

// datasetList prints the datasets of the log; deleted ones only with all.
func datasetList(ctx context.Context, nc *nats.Conn, prefix string, all bool, stdout io.Writer) error {
	r, err := committer.NewReader(ctx, nc, prefix)
	if err != nil {
		return err
	}
	ds, err := r.Datasets(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%-32s %10s %10s\n", "DATASET", "HEAD", "REJECTED")
	for _, d := range ds {
		switch {
		case !d.Deleted:
			fmt.Fprintf(stdout, "%-32s %10d %10d\n", d.Name, d.Head, d.Rejected)
		case all:
			fmt.Fprintf(stdout, "%-32s %10d %10d deleted\n", d.Name, d.Head, d.Rejected)
		}
	}
	return nil
}
