package publish_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"cellguard/committer"
	"cellguard/internal/publish"
	"cellguard/producer"
)

// TestDeletedDatasetIsNotPublished deletes a published dataset (its
// tombstone in the log) under a running manager, purges its directory,
// and starts a new manager, as a restart would: neither publishes it
// again, so the purged directory stays gone; a transaction staged to it
// is rejected with the SDK's typed error; a dataset beside it is still
// published.
func TestDeletedDatasetIsNotPublished(t *testing.T) {
	e := newEnv(t, committer.Config{})
	root := t.TempDir()
	dir, other := filepath.Join(root, "gone.lance"), filepath.Join(root, "kept.lance")
	m1 := e.runManager(t)
	e.createPublished(t, "gone", dir)
	e.createPublished(t, "kept", other)
	head := e.appendOne(t, "gone")
	waitPublished(t, m1, "gone", head)
	stale := e.latest(t, "gone")

	last, ok, err := e.log.Last(t.Context(), e.log.Scheme().DecOf("gone"))
	if err != nil || !ok {
		t.Fatalf("last record: %v %v", ok, err)
	}
	if _, err := e.log.AppendTombstone(t.Context(), "gone", last.Seq, head, "test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "running manager sees the tombstone", func() bool { return m1.Deleted("gone") })
	n, err := publish.Purge(t.Context(), dir)
	if err != nil || n == 0 {
		t.Fatalf("Purge = %d, %v; want the published files deleted", n, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after Purge: stat %s = %v; want not exist", dir, err)
	}
	if n, err := publish.Purge(t.Context(), dir); err != nil || n != 0 {
		t.Fatalf("second Purge = %d, %v; want 0, nil", n, err)
	}

	m2 := e.runManager(t)
	v := e.appendOne(t, "kept")
	waitPublished(t, m2, "kept", v)
	waitFor(t, "restarted manager sees the tombstone", func() bool { return m2.Deleted("gone") })
	if p, ok := m2.Publisher("gone"); ok || p != nil {
		t.Errorf("restarted manager: Publisher(deleted) = %v, %v; want none, false (a caller may use what ok vouches for)", p, ok)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("restarted manager: stat %s = %v; want not exist (nothing republished)", dir, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = e.pc.Commit(ctx, stale.NewTxn().Append(frag(1)))
	var rej *producer.RejectedError
	if !errors.Is(err, producer.ErrDatasetDeleted) || !errors.As(err, &rej) || errors.Is(err, producer.ErrRetryable) {
		t.Fatalf("Commit to a deleted dataset = %v; want a non-retryable rejection matching ErrDatasetDeleted", err)
	}
}
