package table_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"cellguard/internal/txnscript"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// TestTableScenarios runs the table model's scenario scripts,
// testdata/scenarios/*.txt: a table's versions built by Apply, pairs of
// transactions classified by CheckConflict, and stale transactions
// carried onto the head by Rebase. The commands are described in
// testdata/scenarios/README.txt; -rewrite regenerates the expected
// output after a deliberate change.
func TestTableScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/scenarios", func(t *testing.T, path string) {
		if strings.HasSuffix(path, "README.txt") {
			return
		}
		sc := &tableScenario{versions: map[uint64]*table.Manifest{}, txns: map[uint64]*lancepb.Transaction{}, labels: map[string]string{}}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string { return sc.run(t, d) })
	})
}

// tableScenario is one script's table: every version and the transaction
// that made it.
type tableScenario struct {
	build    txnscript.Builder
	versions map[uint64]*table.Manifest
	txns     map[uint64]*lancepb.Transaction
	head     *table.Manifest
	labels   map[string]string // uuid → label
}

// Manifest serves older versions to Apply (Restore).
func (sc *tableScenario) Manifest(_ context.Context, v uint64) (*table.Manifest, error) {
	if m, ok := sc.versions[v]; ok {
		return m, nil
	}
	return nil, table.ErrVersionNotFound
}

func (sc *tableScenario) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "apply":
		return sc.apply(t, d)
	case "conflict":
		return sc.conflict(t, d)
	case "rebase":
		return sc.rebase(t, d)
	case "show":
		v := sc.headVersion()
		if d.HasArg("version") {
			d.ScanArgs(t, "version", &v)
		}
		m, ok := sc.versions[v]
		if !ok {
			return fmt.Sprintf("no version %d", v)
		}
		return describeManifest(m)
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}

func (sc *tableScenario) headVersion() uint64 {
	if sc.head == nil {
		return 0
	}
	return sc.head.Version()
}

// txn builds the command's transaction: id=LABEL [read=V] and the input.
func (sc *tableScenario) txn(t *testing.T, d *datadriven.TestData, lines []string) *lancepb.Transaction {
	label := "txn"
	if d.HasArg("id") {
		d.ScanArgs(t, "id", &label)
	}
	rv := sc.headVersion()
	if d.HasArg("read") {
		d.ScanArgs(t, "read", &rv)
	}
	uuid := txnscript.UUID(label)
	sc.labels[uuid] = label
	body, err := sc.build.Build(uuid, rv, lines)
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	if body.Txn == nil {
		d.Fatalf(t, "the table model takes transactions, not bytes")
	}
	return body.Txn
}

func inputLines(d *datadriven.TestData) []string {
	return strings.Split(strings.TrimSpace(d.Input), "\n")
}

// apply [id=LABEL] [read=V]: apply the transaction to the head (read
// defaults to the head) and make the result the head.
func (sc *tableScenario) apply(t *testing.T, d *datadriven.TestData) string {
	txn := sc.txn(t, d, inputLines(d))
	var head *table.Manifest
	if txn.GetReadVersion() > 0 {
		head = sc.head
	}
	next, err := table.Apply(context.Background(), head, txn, sc)
	if err != nil {
		return "error: " + sc.relabel(err.Error())
	}
	sc.head = next
	sc.versions[next.Version()], sc.txns[next.Version()] = next, txn
	return describeManifest(next)
}

// conflict: two lines, "ours: …" and "theirs: …" (each an operation, as
// txnscript reads it); prints CheckConflict's verdict.
func (sc *tableScenario) conflict(t *testing.T, d *datadriven.TestData) string {
	var ours, theirs *lancepb.Transaction
	for _, l := range inputLines(d) {
		side, desc, ok := strings.Cut(l, ":")
		if !ok {
			d.Fatalf(t, "want ours: … or theirs: …, got %q", l)
		}
		uuid := txnscript.UUID(side)
		sc.labels[uuid] = side
		body, err := sc.build.Build(uuid, 1, []string{strings.TrimSpace(desc)})
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		switch side {
		case "ours":
			ours = body.Txn
		case "theirs":
			theirs = body.Txn
		default:
			d.Fatalf(t, "unknown side %q", side)
		}
	}
	c, err := table.CheckConflict(ours, theirs)
	if err != nil {
		return "error: " + sc.relabel(err.Error())
	}
	return sc.describeConflict(c)
}

// rebase [id=LABEL] read=V: rebase the transaction, read at V, over
// every version committed since onto the head; prints the rebased
// transaction's operation or the conflict. The head does not change.
func (sc *tableScenario) rebase(t *testing.T, d *datadriven.TestData) string {
	txn := sc.txn(t, d, inputLines(d))
	rv := txn.GetReadVersion()
	in := table.RebaseInput{Txn: txn, Read: sc.versions[rv], Head: sc.head}
	for v := rv + 1; v <= sc.headVersion(); v++ {
		in.Committed = append(in.Committed, table.Committed{Version: v, Txn: sc.txns[v]})
	}
	res, err := table.Rebase(context.Background(), in)
	if err != nil {
		return "error: " + sc.relabel(err.Error())
	}
	if res.Conflict != nil {
		return sc.describeConflict(*res.Conflict)
	}
	out := fmt.Sprintf("rebased onto v%d: %s", res.Txn.GetReadVersion(), describeOp(res.Txn))
	next, err := table.Apply(context.Background(), sc.head, res.Txn, sc)
	if err != nil {
		return out + "\nerror applying it: " + sc.relabel(err.Error())
	}
	return out + "\n" + describeManifest(next)
}

func (sc *tableScenario) describeConflict(c table.Conflict) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s vs %s: %s", c.Ours, c.Theirs, c.Resolution)
	if c.TheirsVersion > 0 {
		fmt.Fprintf(&b, " (theirs v%d %s)", c.TheirsVersion, sc.label(c.TheirsUUID))
	}
	if len(c.Fragments) > 0 {
		fmt.Fprintf(&b, " fragments=%v", c.Fragments)
	}
	if c.Reason != "" {
		fmt.Fprintf(&b, "\n  %s", sc.relabel(c.Reason))
	}
	return b.String()
}

func (sc *tableScenario) label(uuid string) string {
	if l, ok := sc.labels[uuid]; ok {
		return l
	}
	return uuid
}

var scenarioUUID = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

func (sc *tableScenario) relabel(s string) string {
	return scenarioUUID.ReplaceAllStringFunc(s, sc.label)
}

// describeOp prints what a transaction does, briefly.
func describeOp(txn *lancepb.Transaction) string {
	kind, err := table.OpOf(txn)
	if err != nil {
		return err.Error()
	}
	op := kind.String()
	switch o := txn.GetOperation().(type) {
	case *lancepb.Transaction_Delete_:
		var parts []string
		if ids := o.Delete.GetDeletedFragmentIds(); len(ids) > 0 {
			parts = append(parts, fmt.Sprintf("deleted=%v", ids))
		}
		for _, f := range o.Delete.GetUpdatedFragments() {
			parts = append(parts, fmt.Sprintf("updated fragment %d (%d rows deleted)", f.GetId(), f.GetDeletionFile().GetNumDeletedRows()))
		}
		return op + " " + strings.Join(parts, " ")
	case *lancepb.Transaction_Append_:
		return fmt.Sprintf("%s %d fragments", op, len(o.Append.GetFragments()))
	}
	return op
}

// describeManifest prints a version: its schema, fragments (rows, the
// fields of each data file, deleted rows, overlays) and indices.
func describeManifest(m *table.Manifest) string {
	var b strings.Builder
	p := m.Proto()
	var names []string
	for _, f := range m.Schema().Fields() {
		names = append(names, f.GetName())
	}
	fmt.Fprintf(&b, "v%d fields=%s", m.Version(), strings.Join(names, ","))
	for _, f := range p.GetFragments() {
		fmt.Fprintf(&b, "\nfragment %d rows=%d", f.GetId(), f.GetPhysicalRows())
		for _, df := range f.GetFiles() {
			fmt.Fprintf(&b, " file%v", df.GetFields())
		}
		if del := f.GetDeletionFile(); del != nil {
			fmt.Fprintf(&b, " deleted=%d", del.GetNumDeletedRows())
		}
		for _, o := range f.GetOverlays() {
			fmt.Fprintf(&b, " overlay%v", o.GetDataFile().GetFields())
		}
	}
	for _, ix := range m.Indices() {
		frags := "none"
		if bm, err := table.DecodeBitmap(ix.GetFragmentBitmap()); err == nil {
			frags = fmt.Sprint(bm.ToArray())
		}
		fmt.Fprintf(&b, "\nindex %s fields=%v fragments=%s", ix.GetName(), ix.GetFields(), frags)
	}
	return b.String()
}
