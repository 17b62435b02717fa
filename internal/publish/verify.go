package publish

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"google.golang.org/protobuf/proto"

	"cellguard/internal/declog"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// Difference is one way a published table disagrees with its decision
// log.
type Difference struct {
	Version uint64 // 0: the table as a whole
	Kind    string // see the Diff* constants
	Detail  string
}

func (d Difference) String() string {
	if d.Version == 0 {
		return d.Kind + ": " + d.Detail
	}
	return "version " + strconv.FormatUint(d.Version, 10) + ": " + d.Kind + ": " + d.Detail
}

// Kinds of Difference.
const (
	DiffManifestMissing    = "manifest missing"
	DiffManifestUnreadable = "manifest unreadable"
	DiffManifestDiffers    = "manifest differs from the log"
	DiffTransactionMissing = "transaction file missing"
	DiffDataMissing        = "data file missing"
	DiffDeletionMissing    = "deletion file missing"
	DiffNotInLog           = "published but not in the decision log"
)

// Verification is what Verify found.
type Verification struct {
	Dataset   string
	Location  string
	LogHead   uint64   // the log's newest committed version (0: none)
	LogFirst  uint64   // the log's first committed version (above 1 for an adopted table)
	Published []uint64 // versions present in the location, ascending
	Files     int      // data, deletion and transaction files checked
	Diffs     []Difference
}

// Behind reports whether the table holds versions above the log's head:
// the log lost acknowledged decisions the publisher had written out
// (Repair brings it forward).
func (v *Verification) Behind() bool {
	return len(v.Published) > 0 && v.Published[len(v.Published)-1] > v.LogHead
}

// Verify checks the decision log of ds against its published Lance table
// in loc: every committed version's manifest is present and equal to the
// one the log implies (the same transaction, schema, fragments and
// everything else but the time it was written), its transaction file and
// every data and deletion file its fragments name exist, and no version
// is published that the log lacks (versions below an adopted dataset's
// first record are the table's own history and are not checked). It
// returns what differs; an error means the check itself could not run.
func Verify(ctx context.Context, l *declog.Log, ds string, loc *Location) (*Verification, error) {
	cfg, err := l.Config(ctx, ds)
	if err != nil {
		return nil, err
	}
	published, err := Versions(ctx, loc)
	if err != nil {
		return nil, err
	}
	out := &Verification{Dataset: ds, Location: loc.URL, Published: published}
	present := map[uint64]bool{}
	for _, v := range published {
		present[v] = true
	}
	seen := map[string]bool{} // files already checked
	exists := func(key string) (bool, error) {
		if ok, done := seen[key]; done {
			return ok, nil
		}
		ok, err := loc.Bucket.Exists(ctx, key)
		if err != nil {
			return false, fmt.Errorf("%w: %s in %s: %v", ErrLocation, key, loc.URL, err)
		}
		seen[key] = ok
		out.Files++
		return ok, nil
	}
	var m *table.Manifest
	inLog := map[uint64]bool{}
	for r, err := range l.Scan(ctx, l.Scheme().Dec(ds, subject.Committed), 1, declog.ScanOptions{}) {
		if err != nil {
			return nil, err
		}
		next, txn, err := declog.Replay(ctx, m, r, l.Versions(ds))
		if err != nil {
			return nil, err
		}
		m = next
		v := next.Version()
		inLog[v] = true
		if out.LogFirst == 0 {
			out.LogFirst = v
		}
		out.LogHead = v
		if err := verifyVersion(ctx, out, loc, present[v], next, txn, cfg, r.Decision.GetAdoptedManifest() != nil, exists); err != nil {
			return nil, err
		}
	}
	for _, v := range published {
		if inLog[v] || v < out.LogFirst {
			continue
		}
		detail := "no committed record of it"
		if f, err := ReadVersion(ctx, loc, v); err == nil {
			detail = "transaction " + txnID(f) + ", no committed record of it"
		}
		out.Diffs = append(out.Diffs, Difference{Version: v, Kind: DiffNotInLog, Detail: detail})
	}
	if out.Behind() {
		out.Diffs = append(out.Diffs, Difference{Kind: "log behind the table", Detail: fmt.Sprintf(
			"the table's newest version is %d, the log's head %d: acknowledged decisions were lost from the log (cellguard dataset repair)",
			published[len(published)-1], out.LogHead)})
	}
	return out, nil
}

// verifyVersion checks one committed version against the location.
func verifyVersion(ctx context.Context, out *Verification, loc *Location, present bool, m *table.Manifest, txn *lancepb.Transaction,
	cfg *cellguardpb.DatasetConfig, adopted bool, exists func(string) (bool, error)) error {
	v := m.Version()
	diff := func(kind, format string, a ...any) {
		out.Diffs = append(out.Diffs, Difference{Version: v, Kind: kind, Detail: fmt.Sprintf(format, a...)})
	}
	if !present {
		diff(DiffManifestMissing, "no %s%s", versionsDir, table.ManifestFileName(v, true))
	} else {
		f, err := ReadVersion(ctx, loc, v)
		if err != nil {
			if errors.Is(err, ErrLocation) {
				return err
			}
			diff(DiffManifestUnreadable, "%v", err)
		} else {
			if what := manifestDiff(f, m, txn, cfg, adopted); what != "" {
				diff(DiffManifestDiffers, "%s", what)
			}
			if tf := f.Manifest.GetTransactionFile(); tf != "" && !adopted {
				ok, err := exists(transactionsDir + tf)
				if err != nil {
					return err
				}
				if !ok {
					diff(DiffTransactionMissing, "%s%s", transactionsDir, tf)
				}
			}
		}
	}
	for _, frag := range m.Proto().GetFragments() {
		for _, df := range frag.GetFiles() {
			if df.BaseId != nil {
				continue // in another base path, outside this location
			}
			key := "data/" + df.GetPath()
			ok, err := exists(key)
			if err != nil {
				return err
			}
			if !ok {
				diff(DiffDataMissing, "fragment %d: %s", frag.GetId(), key)
			}
		}
		if del := frag.GetDeletionFile(); del != nil && del.BaseId == nil {
			key := "_deletions/" + table.DeletionFilePath(frag.GetId(), del)
			ok, err := exists(key)
			if err != nil {
				return err
			}
			if !ok {
				diff(DiffDeletionMissing, "fragment %d: %s", frag.GetId(), key)
			}
		}
	}
	return nil
}

// manifestDiff says how the published manifest file f differs from the
// one the log implies for version m (committed by txn), or "". The write
// time is not compared; an adopted version (written by LanceDB) is
// compared on its version, schema and fragments.
func manifestDiff(f *table.ManifestFile, m *table.Manifest, txn *lancepb.Transaction, cfg *cellguardpb.DatasetConfig, adopted bool) string {
	if id := txnID(f); id != txn.GetUuid() {
		return fmt.Sprintf("transaction %s, the log committed %s", id, txn.GetUuid())
	}
	got := f.Manifest
	if adopted {
		want := m.Proto()
		switch {
		case got.GetVersion() != want.GetVersion():
			return fmt.Sprintf("version field %d", got.GetVersion())
		case !slicesEqual(got.GetFields(), want.GetFields()):
			return "schema"
		case !slicesEqual(got.GetFragments(), want.GetFragments()):
			return "fragments"
		}
		return ""
	}
	exp, err := ManifestFile(m, txn, cfg.GetStorageVersion(), got.GetTimestamp().AsTime())
	if err != nil {
		return err.Error()
	}
	want := exp.Manifest
	want.Timestamp = got.GetTimestamp()
	switch {
	case got.GetVersion() != want.GetVersion():
		return fmt.Sprintf("version field %d", got.GetVersion())
	case !slicesEqual(got.GetFields(), want.GetFields()):
		return "schema"
	case !slicesEqual(got.GetFragments(), want.GetFragments()):
		return "fragments"
	case f.Transaction != nil && !proto.Equal(f.Transaction, txn):
		return "inline transaction"
	}
	g, w := proto.Clone(got).(*lancepb.Manifest), proto.Clone(want).(*lancepb.Manifest)
	// Offsets of the sections depend on the file layout, not the version.
	g.TransactionSection, w.TransactionSection = nil, nil
	g.IndexSection, w.IndexSection = nil, nil
	if !proto.Equal(g, w) {
		return "manifest fields"
	}
	return ""
}

func slicesEqual[M proto.Message](a, b []M) bool {
	return slices.EqualFunc(a, b, func(x, y M) bool { return proto.Equal(x, y) })
}
