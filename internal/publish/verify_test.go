package publish_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cellguard/committer"
	"cellguard/internal/natstest"
	"cellguard/internal/publish"
	"cellguard/producer"
	"cellguard/table"
)

// touchData writes an empty file for every data file the published head
// names (frag's files are never read, only their presence is checked).
func touchData(t *testing.T, dir string, head uint64) {
	t.Helper()
	f, err := table.ReadManifestFile(manifestBytes(t, dir, head))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, fr := range f.Manifest.GetFragments() {
		for _, df := range fr.GetFiles() {
			if err := os.WriteFile(filepath.Join(dir, "data", df.GetPath()), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// copyTable copies a published table directory to a new one.
func copyTable(t *testing.T, dir string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy.lance")
	if out, err := exec.Command("cp", "-a", dir, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	return dst
}

func verify(t *testing.T, e *env, ds, dir string) *publish.Verification {
	t.Helper()
	loc, err := publish.OpenLocation(context.Background(), dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	v, err := publish.Verify(context.Background(), e.log, ds, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func kinds(v *publish.Verification) []string {
	var out []string
	for _, d := range v.Diffs {
		out = append(out, d.String())
	}
	return out
}

func hasDiff(v *publish.Verification, version uint64, kind string) bool {
	return slices.ContainsFunc(v.Diffs, func(d publish.Difference) bool { return d.Version == version && d.Kind == kind })
}

// TestVerifyFindsTampering publishes five versions and verifies the table
// (clean), then copies of it with a version's manifest removed, a data
// file deleted and a transaction file deleted: each difference is named,
// with its version.
func TestVerifyFindsTampering(t *testing.T) {
	e := newEnv(t, committer.Config{})
	dir := filepath.Join(t.TempDir(), "t.lance")
	e.createPublished(t, "t", dir)
	var head uint64
	for range 4 {
		head = e.appendOne(t, "t")
	}
	r := e.startPublisher(t, "t", dir, nil)
	waitFor(t, "publish", func() bool { return r.p.Published() == head })
	r.stop()
	touchData(t, dir, head)

	clean := verify(t, e, "t", dir)
	if len(clean.Diffs) != 0 || clean.LogHead != head || len(clean.Published) != int(head) || clean.Behind() {
		t.Fatalf("clean table: head %d, published %v, diffs %v", clean.LogHead, clean.Published, kinds(clean))
	}
	if clean.Files == 0 {
		t.Fatal("no file checked")
	}

	noManifest := copyTable(t, dir)
	if err := os.Remove(filepath.Join(noManifest, "_versions", table.ManifestFileName(3, true))); err != nil {
		t.Fatal(err)
	}
	if v := verify(t, e, "t", noManifest); len(v.Diffs) != 1 || !hasDiff(v, 3, publish.DiffManifestMissing) {
		t.Errorf("manifest 3 removed: %v", kinds(v))
	}

	noData := copyTable(t, dir)
	f, err := table.ReadManifestFile(manifestBytes(t, dir, 4))
	if err != nil {
		t.Fatal(err)
	}
	frags := f.Manifest.GetFragments()
	added := frags[len(frags)-1].GetFiles()[0].GetPath() // the fragment version 4 appended
	if err := os.Remove(filepath.Join(noData, "data", added)); err != nil {
		t.Fatal(err)
	}
	v := verify(t, e, "t", noData)
	if !hasDiff(v, 4, publish.DiffDataMissing) || hasDiff(v, 3, publish.DiffDataMissing) {
		t.Errorf("data file of version 4 deleted: %v", kinds(v))
	}
	if !strings.Contains(strings.Join(kinds(v), "\n"), added) {
		t.Errorf("the difference does not name %s: %v", added, kinds(v))
	}

	noTxn := copyTable(t, dir)
	if err := os.Remove(filepath.Join(noTxn, "_transactions", f.Manifest.GetTransactionFile())); err != nil {
		t.Fatal(err)
	}
	if v := verify(t, e, "t", noTxn); len(v.Diffs) != 1 || !hasDiff(v, 4, publish.DiffTransactionMissing) {
		t.Errorf("transaction file of version 4 deleted: %v", kinds(v))
	}
}

// TestRepairLogBehindTable makes the log lose its acknowledged tail the
// way a power failure with syncing opted out does: the server's store is
// put back to a copy taken at version 3, while the table was published up
// to version 5. Verify says the log is behind and names versions 4 and 5;
// repair appends them from the table; verify is clean again, a restarted
// committer decides the next commit as version 6 (no version lost or
// reused), and the publisher publishes it.
func TestRepairLogBehindTable(t *testing.T) {
	e := newEnv(t, committer.Config{})
	dir := filepath.Join(t.TempDir(), "t.lance")
	e.createPublished(t, "t", dir)
	e.appendOne(t, "t")
	e.appendOne(t, "t")
	e.stopCommitter()
	e.srv.Stop()
	snapshot := filepath.Join(t.TempDir(), "store")
	if out, err := exec.Command("cp", "-a", e.srv.StoreDir(), snapshot).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	e.srv.Restart(t)
	e.startCommitter(t, committer.Config{})
	e.appendOne(t, "t")
	head := e.appendOne(t, "t")
	r := e.startPublisher(t, "t", dir, nil)
	waitFor(t, "publish", func() bool { return r.p.Published() == head })
	r.stop()
	touchData(t, dir, head)
	e.stopCommitter()
	e.srv.Stop()
	if err := os.RemoveAll(e.srv.StoreDir()); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", snapshot, e.srv.StoreDir()).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	e.srv.Restart(t)

	var behind *publish.Verification
	waitFor(t, "the log to be read again", func() bool {
		loc, err := publish.OpenLocation(context.Background(), dir, false)
		if err != nil {
			t.Fatal(err)
		}
		defer loc.Close()
		behind, err = publish.Verify(context.Background(), e.log, "t", loc)
		return err == nil
	})
	if !behind.Behind() || behind.LogHead != head-2 || !hasDiff(behind, 4, publish.DiffNotInLog) || !hasDiff(behind, 5, publish.DiffNotInLog) {
		t.Fatalf("log behind: head %d, behind %v, diffs %v", behind.LogHead, behind.Behind(), kinds(behind))
	}

	loc, err := publish.OpenLocation(context.Background(), dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	repaired, err := publish.Repair(context.Background(), e.log, "t", loc)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(repaired, []uint64{4, 5}) {
		t.Fatalf("repaired %v, want [4 5]", repaired)
	}
	if v := verify(t, e, "t", dir); len(v.Diffs) != 0 || v.LogHead != head {
		t.Fatalf("after repair: head %d, diffs %v", v.LogHead, kinds(v))
	}
	if again, err := publish.Repair(context.Background(), e.log, "t", loc); err != nil || len(again) != 0 {
		t.Fatalf("second repair: %v, %v; want nothing to do", again, err)
	}

	e.startCommitter(t, committer.Config{})
	pnc, _ := natstest.Connect(t, e.srv.URL())
	pc, err := producer.New(pnc, producer.Config{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	snap, err := pc.Latest(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if v, err := pc.Commit(ctx, snap.NewTxn().Append(frag(2))); err != nil || v != head+1 {
		t.Fatalf("the next commit: version %d, %v; want %d", v, err, head+1)
	}
	r = e.startPublisher(t, "t", dir, nil)
	waitFor(t, "publish the next version", func() bool { return r.p.Published() == head+1 || r.p.Stopped() != nil })
	if err := r.p.Stopped(); err != nil {
		t.Fatalf("publishing stopped: %v", err)
	}
}

// TestRepairRefusesADisagreement: a version the log committed with
// another transaction than the table's is not repaired.
func TestRepairRefusesADisagreement(t *testing.T) {
	e := newEnv(t, committer.Config{})
	dir := filepath.Join(t.TempDir(), "t.lance")
	e.createPublished(t, "t", dir)
	head := e.appendOne(t, "t")
	r := e.startPublisher(t, "t", dir, nil)
	waitFor(t, "publish", func() bool { return r.p.Published() == head })
	r.stop()
	touchData(t, dir, head)
	// Another table's version 2 in this table's place, and a version 3
	// above the log's head.
	other := filepath.Join(t.TempDir(), "o.lance")
	e.createPublished(t, "o", other)
	e.appendOne(t, "o")
	oh := e.appendOne(t, "o")
	ro := e.startPublisher(t, "o", other, nil)
	waitFor(t, "publish o", func() bool { return ro.p.Published() == oh })
	ro.stop()
	for _, v := range []uint64{2, 3} {
		name := table.ManifestFileName(v, true)
		b, err := os.ReadFile(filepath.Join(other, "_versions", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "_versions", name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v := verify(t, e, "t", dir)
	if !hasDiff(v, 2, publish.DiffManifestDiffers) || !v.Behind() {
		t.Fatalf("diffs %v", kinds(v))
	}
	loc, err := publish.OpenLocation(context.Background(), dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	if got, err := publish.Repair(context.Background(), e.log, "t", loc); !errors.Is(err, publish.ErrCannotRepair) || len(got) != 0 {
		t.Fatalf("repair: %v, %v; want ErrCannotRepair and nothing appended", got, err)
	}
}
