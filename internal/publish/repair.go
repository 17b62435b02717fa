package publish

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"cellguard/internal/declog"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// ErrCannotRepair reports a divergence Repair does not mend: anything but
// a log whose committed tail is missing while the table holds it.
var ErrCannotRepair = errors.New("publish: cannot repair")

// RepairMessage is the message of every record Repair appends.
const RepairMessage = "restored from the published Lance table by cellguard dataset repair"

// repairBatch is the most records Repair appends in one atomic batch.
const repairBatch = 100

// Repair brings the decision log of ds forward when it is behind its
// published table (an acknowledged tail of the log was lost, e.g. to a
// power failure with syncing opted out, while the manifests the publisher
// had written survived): for each published version above the log's head,
// in order, it reads the manifest and its transaction, checks that the
// transaction applied to the version before makes exactly the published
// manifest, and appends the committed record the committer would have
// written, fenced on the dataset's last record (a committer appending
// meanwhile makes the append fail with declog.ErrFenced, and nothing is
// written). Versions are then neither lost nor reused: the next decision
// is the table's newest version + 1, and a transaction staged again is
// found decided. It returns the versions appended (none when the log is
// not behind). Any other divergence (a missing manifest, a version the
// log committed with another transaction, a gap) is ErrCannotRepair.
func Repair(ctx context.Context, l *declog.Log, ds string, loc *Location) ([]uint64, error) {
	ver, err := Verify(ctx, l, ds, loc)
	if err != nil {
		return nil, err
	}
	if !ver.Behind() {
		return nil, nil
	}
	for _, d := range ver.Diffs {
		if d.Version != 0 && d.Version <= ver.LogHead && d.Kind != DiffDataMissing && d.Kind != DiffDeletionMissing {
			return nil, fmt.Errorf("%w: %s: %s (the log and the table disagree below the log's head)", ErrCannotRepair, ds, d)
		}
	}
	if ver.LogHead == 0 {
		return nil, fmt.Errorf("%w: %s: the log has no committed version to continue from", ErrCannotRepair, ds)
	}
	cfg, err := l.Config(ctx, ds)
	if err != nil {
		return nil, err
	}
	m, _, err := l.Load(ctx, ds, ver.LogHead, l.Versions(ds))
	if err != nil {
		return nil, err
	}
	newest := ver.Published[len(ver.Published)-1]
	var decs []*cellguardpb.Decision
	for v := ver.LogHead + 1; v <= newest; v++ {
		f, err := ReadVersion(ctx, loc, v)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: version %d: %v", ErrCannotRepair, ds, v, err)
		}
		txn, err := publishedTxn(ctx, loc, f)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: version %d: %v", ErrCannotRepair, ds, v, err)
		}
		body, err := proto.MarshalOptions{Deterministic: true}.Marshal(txn)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: version %d: encode transaction: %v", ErrCannotRepair, ds, v, err)
		}
		d := &cellguardpb.Decision{
			Dataset: ds, TxnUuid: txn.GetUuid(), Outcome: cellguardpb.Outcome_OUTCOME_COMMITTED, Version: v,
			Transaction: body, ReadVersion: txn.GetReadVersion(), HeadVersion: v - 1, Message: RepairMessage,
		}
		next, _, err := declog.Replay(ctx, m, declog.Record{Dataset: ds, Outcome: d.Outcome, TxnID: d.TxnUuid, Version: v, Decision: d}, l.Versions(ds))
		if err != nil {
			return nil, fmt.Errorf("%w: %s: version %d: %v", ErrCannotRepair, ds, v, err)
		}
		if what := manifestDiff(f, next, txn, cfg, false); what != "" {
			return nil, fmt.Errorf("%w: %s: version %d: its transaction applied to version %d does not make the published manifest (%s)", ErrCannotRepair, ds, v, v-1, what)
		}
		m = next
		decs = append(decs, d)
	}
	last, ok, err := l.Last(ctx, l.Scheme().DecOf(ds))
	if err != nil {
		return nil, err
	}
	var expect uint64
	if ok {
		expect = last.Seq
	}
	var done []uint64
	for len(decs) > 0 {
		n := min(len(decs), repairBatch)
		seqs, err := l.Append(ctx, ds, expect, decs[:n])
		if err != nil {
			return done, fmt.Errorf("%s: append versions %d-%d: %w", ds, decs[0].GetVersion(), decs[n-1].GetVersion(), err)
		}
		for _, d := range decs[:n] {
			done = append(done, d.GetVersion())
		}
		expect = seqs[len(seqs)-1]
		decs = decs[n:]
	}
	return done, nil
}

// publishedTxn returns the transaction of a published version: the
// manifest's inline one, or its transaction file.
func publishedTxn(ctx context.Context, loc *Location, f *table.ManifestFile) (*lancepb.Transaction, error) {
	if f.Transaction != nil {
		return f.Transaction, nil
	}
	name := f.Manifest.GetTransactionFile()
	if name == "" {
		return nil, fmt.Errorf("no transaction in the manifest nor a transaction file")
	}
	b, err := loc.ReadRegular(ctx, transactionsDir+name, MaxFileBytes)
	if err != nil {
		return nil, err
	}
	txn := &lancepb.Transaction{}
	if err := proto.Unmarshal(b, txn); err != nil {
		return nil, fmt.Errorf("%s%s: %v", transactionsDir, name, err)
	}
	return txn, nil
}
