package decide

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"cellguard/evaluator"
	"cellguard/internal/logrec"
	"cellguard/internal/txnscript"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// TestDecideScenarios runs the decision core's scenario scripts,
// testdata/*.txt: one dataset's state driven by staged
// transactions, with every decision printed as a line a reader can check.
// The commands are described in testdata/README.txt. Run with
// -rewrite to regenerate the expected output after a deliberate change.
func TestDecideScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if strings.HasSuffix(path, "README.txt") {
			return
		}
		sc := &scenario{t: t}
		datadriven.RunTest(t, path, sc.run)
	})
}

// scenario is one script's dataset: the decision state, the log it has
// written (records and what each committed version looks like), and the
// labels the script gives transactions in place of uuids.
type scenario struct {
	t    *testing.T
	st   *State
	lim  Limits
	hist *memHistory
	recs []*cellguardpb.Decision
	seq  uint64 // the last staged message's sequence
	// batch is the open batch's mark and decisions (nil: none open).
	batch     *Mark
	batchRecs []*cellguardpb.Decision
	batchNext []*scenarioVersion
	build     txnscript.Builder
	labels    map[string]string  // uuid → label
	cp        *logrec.Checkpoint // the last checkpoint taken
}

type scenarioVersion struct {
	m   *table.Manifest
	txn *lancepb.Transaction
}

func (sc *scenario) run(t *testing.T, d *datadriven.TestData) string {
	sc.t = t
	switch d.Cmd {
	case "dataset":
		return sc.dataset(d)
	case "stage":
		return sc.stage(d)
	case "begin":
		if sc.batch != nil {
			d.Fatalf(t, "a batch is open already")
		}
		m := sc.st.Mark()
		sc.batch = &m
		return "ok"
	case "commit":
		return sc.endBatch(d, true)
	case "rollback":
		return sc.endBatch(d, false)
	case "checkpoint":
		return sc.checkpoint(d)
	case "reload":
		return sc.reload(d)
	case "show":
		return sc.show()
	case "tombstone":
		return sc.tombstone(d)
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}

// dataset [window=N] [maxlag=N] [rebaselag=N] [retain=N] [policy=protected|strict|ignore]
func (sc *scenario) dataset(d *datadriven.TestData) string {
	sc.lim = Limits{MaxTxnBytes: 1 << 20, Window: 8, MaxLag: 1000}
	for _, a := range d.CmdArgs {
		n := func() uint64 { return sc.uint(d, a.Key) }
		switch a.Key {
		case "window":
			sc.lim.Window = int(n())
		case "maxlag":
			sc.lim.MaxLag = n()
		case "rebaselag":
			sc.lim.MaxRebaseLag = n()
		case "retain":
			sc.lim.Retain = n()
		case "maxtxn":
			sc.lim.MaxTxnBytes = int(n())
		case "policy":
			p, ok := evaluator.ParseDeletionPolicy(a.Vals[0])
			if !ok {
				d.Fatalf(sc.t, "unknown deletion policy %q", a.Vals[0])
			}
			sc.lim.Rules.Policy = p
		default:
			d.Fatalf(sc.t, "dataset: unknown argument %q", a.Key)
		}
	}
	sc.hist = newMemHistory()
	sc.st = NewState("scenario", sc.lim, sc.hist)
	sc.labels = map[string]string{}
	return "ok"
}

// stage id=LABEL [read=N] [msgid=ID] [uuid=TEXT]
// then one operation line and any number of "pre" lines (see README.txt).
func (sc *scenario) stage(d *datadriven.TestData) string {
	if sc.st == nil {
		d.Fatalf(sc.t, "stage before dataset")
	}
	var label, msgID string
	var rv uint64
	uuid := ""
	for _, a := range d.CmdArgs {
		switch a.Key {
		case "id":
			label = a.Vals[0]
		case "read":
			rv = sc.uint(d, "read")
		case "msgid":
			msgID = a.Vals[0]
		case "uuid":
			uuid = a.Vals[0]
		default:
			d.Fatalf(sc.t, "stage: unknown argument %q", a.Key)
		}
	}
	if label == "" {
		d.Fatalf(sc.t, "stage needs id=LABEL")
	}
	if uuid == "" {
		uuid = txnscript.UUID(label)
	}
	sc.labels[uuid] = label
	body := sc.body(d, uuid, rv)
	sc.seq++
	in := Staged{Seq: sc.seq, Data: body, MsgID: msgID}
	own := sc.batch == nil
	if own {
		m := sc.st.Mark()
		sc.batch = &m
	}
	v := sc.st.Decide(context.Background(), in)
	out := sc.describe(label, v)
	if v.Skip || v.Broken != nil {
		if own {
			sc.st.Rollback(*sc.batch)
			sc.batch = nil
		}
		return out
	}
	sc.batchRecs = append(sc.batchRecs, v.Rec)
	var next *scenarioVersion
	if v.Next != nil {
		txn, err := v.CommittedTxn()
		if err != nil {
			d.Fatalf(sc.t, "the committed transaction does not decode: %v", err)
		}
		next = &scenarioVersion{m: v.Next, txn: txn}
	}
	sc.batchNext = append(sc.batchNext, next)
	if own {
		sc.endBatch(d, true)
	}
	return out
}

// endBatch commits (the log stored every record) or rolls back (the
// append failed) the open batch.
func (sc *scenario) endBatch(d *datadriven.TestData, keep bool) string {
	if sc.batch == nil {
		d.Fatalf(sc.t, "no batch is open")
	}
	n := len(sc.batchRecs)
	if !keep {
		sc.st.Rollback(*sc.batch)
	} else {
		seqs := make([]uint64, n)
		for i, r := range sc.batchRecs {
			seqs[i] = uint64(len(sc.recs) + 1)
			sc.recs = append(sc.recs, r)
			if nv := sc.batchNext[i]; nv != nil {
				sc.hist.Manifests[nv.m.Version()], sc.hist.Txns[nv.m.Version()] = nv.m, nv.txn
			}
		}
		sc.st.Commit(*sc.batch, sc.batchRecs, seqs)
	}
	sc.batch, sc.batchRecs, sc.batchNext = nil, nil, nil
	if keep {
		return fmt.Sprintf("committed %d decisions; head v%d", n, sc.st.HeadVersion())
	}
	return fmt.Sprintf("rolled back %d decisions; head v%d", n, sc.st.HeadVersion())
}

// checkpoint takes a checkpoint at the head, as the committer writes one
// between batches: the manifest and what the state knows of the log.
func (sc *scenario) checkpoint(d *datadriven.TestData) string {
	if sc.batch != nil || sc.st.Head == nil {
		d.Fatalf(sc.t, "checkpoint needs a dataset and no open batch")
	}
	sc.cp = &logrec.Checkpoint{Dataset: "scenario", Version: sc.st.HeadVersion(), DecSeq: uint64(len(sc.recs)),
		TxnSeq: sc.st.LastTxnSeq, Manifest: sc.st.Head, Log: sc.st.LogState()}
	return fmt.Sprintf("checkpoint at v%d after %d records", sc.cp.Version, sc.cp.DecSeq)
}

// reload starts a fresh state as a restarted committer builds it: from the
// last checkpoint, if one was taken (reload whole: from nothing), then the
// log records after it.
func (sc *scenario) reload(d *datadriven.TestData) string {
	if sc.batch != nil {
		d.Fatalf(sc.t, "reload with a batch open")
	}
	st := NewState("scenario", sc.lim, sc.hist)
	var after uint64
	if cp := sc.cp; cp != nil && !d.HasArg("whole") {
		st.SetBase(cp.Manifest)
		st.SetLogState(*cp)
		after = cp.DecSeq
	}
	replayed := 0
	for i, r := range sc.recs[after:] {
		seq := after + uint64(i) + 1
		rec := logrec.Record{Seq: seq, Dataset: "scenario", Outcome: r.GetOutcome(), TxnID: r.GetTxnUuid(),
			TxnSeq: r.GetTxnSeq(), Version: r.GetVersion(), Decision: r}
		if err := st.Replay(context.Background(), rec); err != nil {
			return fmt.Sprintf("replay of record %d: %v", seq, sc.relabel(err.Error()))
		}
		replayed++
	}
	sc.st = st
	return fmt.Sprintf("replayed %d records; head v%d", replayed, st.HeadVersion())
}

// tombstone appends the dataset's tombstone to the log, as `cellguard
// dataset delete` does; the state learns of it as of any record it did
// not write (a catch-up after its next append is fenced out).
func (sc *scenario) tombstone(d *datadriven.TestData) string {
	if sc.batch != nil {
		d.Fatalf(sc.t, "tombstone with a batch open")
	}
	r := &cellguardpb.Decision{Dataset: "scenario", TxnUuid: "tombstone", Outcome: cellguardpb.Outcome_OUTCOME_DELETED, HeadVersion: sc.st.HeadVersion()}
	sc.recs = append(sc.recs, r)
	seq := uint64(len(sc.recs))
	if err := sc.st.Replay(context.Background(), logrec.Record{Seq: seq, Dataset: "scenario", Outcome: r.Outcome, TxnID: r.TxnUuid, Decision: r}); err != nil {
		return fmt.Sprintf("replay of the tombstone: %v", err)
	}
	return fmt.Sprintf("tombstone at record %d", seq)
}

// show prints the head: its fragments, each with its rows, files (by the
// fields they hold), deletion state and overlays, and its indices.
func (sc *scenario) show() string {
	h := sc.st.Head
	if h == nil {
		return "no dataset"
	}
	var b strings.Builder
	p := h.Proto()
	fmt.Fprintf(&b, "v%d fields=%s\n", h.Version(), fieldNames(h.Schema()))
	for _, f := range p.GetFragments() {
		fmt.Fprintf(&b, "fragment %d rows=%d", f.GetId(), f.GetPhysicalRows())
		for _, df := range f.GetFiles() {
			fmt.Fprintf(&b, " file%v", df.GetFields())
		}
		if f.GetDeletionFile() != nil {
			fmt.Fprintf(&b, " deleted=%d", f.GetDeletionFile().GetNumDeletedRows())
		}
		b.WriteString("\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

func fieldNames(s *table.Schema) string {
	var names []string
	for _, f := range s.Fields() {
		names = append(names, f.GetName())
	}
	return strings.Join(names, ",")
}

// body builds the staged message from the command's input (txnscript).
func (sc *scenario) body(d *datadriven.TestData, uuid string, rv uint64) []byte {
	body, err := sc.build.Build(uuid, rv, strings.Split(strings.TrimSpace(d.Input), "\n"))
	if err != nil {
		d.Fatalf(sc.t, "%v", err)
	}
	if body.Txn == nil {
		return body.Raw
	}
	return mustMarshal(sc.t, body.Txn)
}

// describe prints a verdict as the script expects it.
func (sc *scenario) describe(label string, v Verdict) string {
	switch {
	case v.Broken != nil:
		return fmt.Sprintf("%s: broken state: %s", label, sc.relabel(v.Broken.Error()))
	case v.Skip:
		return fmt.Sprintf("%s: skipped (decided before)", label)
	}
	r := v.Rec
	var b strings.Builder
	switch r.GetOutcome() {
	case cellguardpb.Outcome_OUTCOME_COMMITTED:
		fmt.Fprintf(&b, "%s: committed v%d", label, r.GetVersion())
		if rv := r.GetReadVersion(); rv > 0 && rv < r.GetVersion()-1 {
			fmt.Fprintf(&b, " (read v%d, landed on v%d)", rv, r.GetVersion()-1)
		}
		if len(v.Deletions) > 0 {
			fmt.Fprintf(&b, "\n  writes %d merged deletion files", len(v.Deletions))
		}
	case cellguardpb.Outcome_OUTCOME_REJECTED:
		fmt.Fprintf(&b, "%s: rejected %s", label, strings.TrimPrefix(r.GetReason().String(), "REASON_"))
		if cv := r.GetConflictVersion(); cv > 0 {
			fmt.Fprintf(&b, "\n  conflict v%d %s", cv, sc.label(r.GetConflictTxnUuid()))
		}
		for _, vi := range r.GetViolations() {
			fmt.Fprintf(&b, "\n  violation pre=%d field=%s frag=%d %s", vi.GetPreconditionIndex(), txnscript.FieldName(vi.GetFieldId()), vi.GetFragmentId(), vi.GetReason())
			if len(vi.GetSampleRows()) > 0 {
				fmt.Fprintf(&b, " rows=%v", vi.GetSampleRows())
			}
			if cv := vi.GetCulpritVersion(); cv > 0 {
				fmt.Fprintf(&b, " culprit=v%d", cv)
				if u := vi.GetCulpritTxnUuid(); u != "" {
					fmt.Fprintf(&b, " %s", sc.label(u))
				}
			} else {
				b.WriteString(" culprit=unknown")
			}
		}
		if m := r.GetMessage(); m != "" {
			fmt.Fprintf(&b, "\n  message: %s", sc.relabel(m))
		}
	default:
		fmt.Fprintf(&b, "%s: %s", label, r.GetOutcome())
	}
	return b.String()
}

// The labels: a script names transactions, the state sees uuids made from
// the names.

func (sc *scenario) label(uuid string) string {
	if l, ok := sc.labels[uuid]; ok {
		return l
	}
	return uuid
}

var uuidPattern = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// relabel replaces the uuids in a message by their labels.
func (sc *scenario) relabel(s string) string {
	return uuidPattern.ReplaceAllStringFunc(s, sc.label)
}

func (sc *scenario) uint(d *datadriven.TestData, key string) uint64 {
	var s string
	d.ScanArgs(sc.t, key, &s)
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		d.Fatalf(sc.t, "%s=%q: %v", key, s, err)
	}
	return n
}
