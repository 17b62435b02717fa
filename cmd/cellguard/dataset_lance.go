package main

// dataset_lance.go: the dataset verbs of Lance publishing:
// the --location/--readers/--storage-version options of `dataset create`,
// the publishing lines of `dataset show`, and `dataset adopt`.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
	lancepub "cellguard/internal/publish"
	"cellguard/internal/subject"
	"cellguard/producer"
	"cellguard/proto/cellguardpb"
)

// lanceFlags are the publishing options of `dataset create`.
type lanceFlags struct {
	location       string
	readers        string
	storageVersion string
}

// config returns the configuration to record on the creating transaction:
// the options given, and always the data storage version (default
// lancepub.DefaultStorageVersion), so the new table has it whether or not
// it is published. Without --location the committer applies its default
// (--lance-root, or no publishing).
func (f lanceFlags) config(ctx context.Context) (*cellguardpb.DatasetConfig, error) {
	cfg := &cellguardpb.DatasetConfig{Location: f.location, StorageVersion: f.storageVersion}
	switch f.readers {
	case "", "lance8":
		cfg.Readers = cellguardpb.Readers_READERS_LANCE8
	case "cellguard":
		cfg.Readers = cellguardpb.Readers_READERS_CELLGUARD
	default:
		return nil, usageError{fmt.Sprintf("--readers %q: want lance8 or cellguard", f.readers)}
	}
	switch f.storageVersion {
	case "":
		cfg.StorageVersion = lancepub.DefaultStorageVersion
	case "2.0", "2.1", "2.2":
	default:
		return nil, usageError{fmt.Sprintf("--storage-version %q: want 2.0, 2.1 or 2.2", f.storageVersion)}
	}
	if f.location != "" {
		if err := checkNewLocation(ctx, f.location); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// ErrLocationInUse reports a location that already holds Lance versions
// where a new dataset was to be created.
var ErrLocationInUse = errors.New("location already holds a Lance table")

// checkNewLocation checks that a new dataset can be published at loc: it
// opens (creating a local directory), holds no Lance version yet, and
// takes a write.
func checkNewLocation(ctx context.Context, loc string) error {
	l, err := lancepub.OpenLocation(ctx, loc, true)
	if err != nil {
		return err
	}
	defer l.Close()
	latest, err := lancepub.LatestVersion(ctx, l)
	if err != nil {
		return err
	}
	if latest > 0 {
		return fmt.Errorf("%w: %s is at version %d (use `cellguard dataset adopt`)", ErrLocationInUse, loc, latest)
	}
	return lancepub.CheckWritable(ctx, l)
}

// showPublishing prints where ds is published and how far behind the log
// its location is.
func showPublishing(ctx context.Context, nc *nats.Conn, prefix, ds string, head uint64, stdout io.Writer) error {
	sc, err := subject.NewScheme(prefix)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	l, err := declog.Open(ctx, js, sc, declog.Options{})
	if err != nil {
		return err
	}
	t, deleted, err := l.Tombstone(ctx, ds)
	if err != nil {
		return err
	}
	if deleted {
		fmt.Fprintf(stdout, "DELETED at head v%d (tombstone at log sequence %d): nothing more is committed or published\n", t.Decision.GetHeadVersion(), t.Seq)
	}
	cfg, err := l.Config(ctx, ds)
	if err != nil {
		return err
	}
	if cfg.GetLocation() == "" {
		fmt.Fprintln(stdout, "published: no (no location)")
		return nil
	}
	readers := strings.ToLower(strings.TrimPrefix(cfg.GetReaders().String(), "READERS_"))
	fmt.Fprintf(stdout, "location: %s (readers %s, storage version %s)\n", cfg.GetLocation(), readers, cfg.GetStorageVersion())
	if deleted {
		// Storage no longer follows the log (a drop purges it): a
		// version or lag read from it would mean nothing.
		fmt.Fprintln(stdout, "published: no longer (the dataset is deleted; its directory is left as it was, or purged)")
		return nil
	}
	loc, err := lancepub.OpenLocation(ctx, cfg.GetLocation(), false)
	if err != nil {
		fmt.Fprintf(stdout, "published: unknown: %v\n", err)
		return nil
	}
	defer loc.Close()
	st, err := lancepub.ReadStatus(ctx, l, ds, loc)
	if err != nil {
		fmt.Fprintf(stdout, "published: unknown: %v\n", err)
		return nil
	}
	if st.Foreign {
		fmt.Fprintf(stdout, "publishing stopped: version %d in storage (transaction %s) was not written by cellguard; the log's head is %d\n", st.Latest, st.TxnID, head)
		return nil
	}
	fmt.Fprintf(stdout, "published: version %d, lag %d\n", st.Latest, head-min(head, st.Latest))
	return nil
}

// datasetAdopt starts dataset name from the latest version of the Lance
// table at location.
func datasetAdopt(ctx context.Context, nc *nats.Conn, prefix, name, location string, wait time.Duration, stdout io.Writer) error {
	if location == "" {
		return usageError{"dataset adopt: --location is required"}
	}
	pc, err := producer.New(nc, producer.Config{Prefix: prefix, Timeout: wait})
	if err != nil {
		return err
	}
	defer pc.Close()
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	v, err := lancepub.Adopt(ctx, pc, name, location)
	var rej *producer.RejectedError
	if errors.As(err, &rej) {
		return fmt.Errorf("dataset %s not adopted: %s: %s", name, rej.Reason, rej.Message)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "dataset %s adopted %s at version %d; the next commit is version %d\n", name, location, v, v+1)
	return nil
}
