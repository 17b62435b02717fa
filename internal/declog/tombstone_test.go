package declog_test

import (
	"errors"
	"testing"

	"cellguard/internal/declog"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// TestTombstone appends a dataset's tombstone fenced like a decision and
// reads it back through every reader: a stale fence and a second
// tombstone are refused, the committer's next append on the old fence
// is fenced out, and headers-only and full scans see OUTCOME_DELETED.
func TestTombstone(t *testing.T) {
	l, _, sc := openLog(t)
	ctx := t.Context()
	ds := "cities"
	seqs, err := l.Append(ctx, ds, 0, []*cellguardpb.Decision{committed(t, ds, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := l.Tombstone(ctx, ds); err != nil || ok {
		t.Fatalf("Tombstone(live dataset) = ok %v, %v; want none", ok, err)
	}
	if _, err := l.AppendTombstone(ctx, ds, 0, 1, "test"); !errors.Is(err, declog.ErrFenced) {
		t.Fatalf("AppendTombstone(stale expect) = %v; want ErrFenced", err)
	}
	seq, err := l.AppendTombstone(ctx, ds, seqs[0], 1, "deleted by test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, ds, seqs[0], []*cellguardpb.Decision{committed(t, ds, 2)}); !errors.Is(err, declog.ErrFenced) {
		t.Fatalf("committer Append on the fence before the tombstone = %v; want ErrFenced", err)
	}
	if _, err := l.AppendTombstone(ctx, ds, seq, 1, "again"); !errors.Is(err, declog.ErrFenced) {
		t.Fatalf("second AppendTombstone = %v; want ErrFenced (one tombstone per dataset)", err)
	}
	r, ok, err := l.Tombstone(ctx, ds)
	if err != nil || !ok || r.Seq != seq || !r.Deleted() || r.Committed() || r.Decision.GetHeadVersion() != 1 || r.Decision.GetMessage() != "deleted by test" {
		t.Fatalf("Tombstone = %+v ok %v, %v; want the record at %d", r, ok, err, seq)
	}
	for _, headersOnly := range []bool{true, false} {
		var outcomes []cellguardpb.Outcome
		for r, err := range l.Scan(ctx, sc.DecOf(ds), 1, declog.ScanOptions{HeadersOnly: headersOnly}) {
			if err != nil {
				t.Fatal(err)
			}
			outcomes = append(outcomes, r.Outcome)
		}
		if len(outcomes) != 2 || outcomes[1] != cellguardpb.Outcome_OUTCOME_DELETED {
			t.Fatalf("Scan(headersOnly=%v) outcomes = %v; want committed, deleted", headersOnly, outcomes)
		}
	}
	if _, err := l.AppendTombstone(ctx, "a.b", 0, 0, ""); !errors.Is(err, subject.ErrInvalidDataset) {
		t.Fatalf("AppendTombstone(invalid name) = %v; want ErrInvalidDataset", err)
	}
}
