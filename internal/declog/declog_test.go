package declog_test

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"cellguard/internal/declog"
	"cellguard/internal/natstest"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

var schema = []*lancepb.Field{{Id: 0, Name: "id", ParentId: -1, LogicalType: "int64"}}

func fragment(path string) *lancepb.DataFragment {
	return &lancepb.DataFragment{PhysicalRows: 10, Files: []*lancepb.DataFile{{Path: path, Fields: []int32{0}, ColumnIndices: []int32{0}, FileMajorVersion: 2}}}
}

// committed returns the committed decision of version v of ds.
func committed(t *testing.T, ds string, v uint64) *cellguardpb.Decision {
	t.Helper()
	id := fmt.Sprintf("00000000-0000-4000-8000-%012d", v)
	txn := &lancepb.Transaction{Uuid: id, ReadVersion: v - 1, Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{
		Fragments: []*lancepb.DataFragment{fragment(id + ".lance")},
	}}}
	if v == 1 {
		txn.Operation = &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{Schema: schema, Fragments: []*lancepb.DataFragment{fragment(id + ".lance")}}}
	}
	b, err := proto.Marshal(txn)
	if err != nil {
		t.Fatal(err)
	}
	return &cellguardpb.Decision{Dataset: ds, TxnUuid: id, TxnSeq: v, Outcome: cellguardpb.Outcome_OUTCOME_COMMITTED, Version: v, Transaction: b}
}

func rejected(ds, id string, seq uint64) *cellguardpb.Decision {
	return &cellguardpb.Decision{Dataset: ds, TxnUuid: id, TxnSeq: seq, Outcome: cellguardpb.Outcome_OUTCOME_REJECTED, Reason: cellguardpb.Reason_PRECONDITION_FAILED}
}

// openLog starts a server with the decision stream and checkpoint bucket.
func openLog(t *testing.T) (*declog.Log, jetstream.JetStream, subject.Scheme) {
	t.Helper()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	sc, _ := subject.NewScheme("")
	dec, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: sc.DecStream(), Subjects: []string{sc.DecAll()}, AllowAtomicPublish: true})
	if err != nil {
		t.Fatal(err)
	}
	obj, err := js.CreateObjectStore(t.Context(), jetstream.ObjectStoreConfig{Bucket: sc.CheckpointBucket()})
	if err != nil {
		t.Fatal(err)
	}
	return declog.New(js, sc, dec, obj, declog.Options{}), js, sc
}

// TestAppendScanLoad writes a log through Append and reads it back with
// every reader: Scan (bodies and headers), Last, At, Find, VersionSeq,
// Load (from the start and from a checkpoint).
func TestAppendScanLoad(t *testing.T) {
	l, _, sc := openLog(t)
	ctx := t.Context()
	ds := "cities"
	seqs, err := l.Append(ctx, ds, 0, []*cellguardpb.Decision{committed(t, ds, 1), rejected(ds, "r-1", 2)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(seqs), "[1 2]"; got != want {
		t.Fatalf("Append(batch) sequences = %s; want %s", got, want)
	}
	if _, err := l.Append(ctx, ds, 1, []*cellguardpb.Decision{committed(t, ds, 2)}); !errors.Is(err, declog.ErrFenced) {
		t.Fatalf("Append(stale expect) = %v; want ErrFenced", err)
	}
	expect := seqs[1]
	for v := uint64(2); v <= 4; v++ {
		s, err := l.Append(ctx, ds, expect, []*cellguardpb.Decision{committed(t, ds, v)})
		if err != nil {
			t.Fatal(err)
		}
		expect = s[0]
	}

	var got []string
	for r, err := range l.Scan(ctx, sc.DecOf(ds), 1, declog.ScanOptions{HeadersOnly: true}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d:%v:%d", r.Seq, r.Committed(), r.Version))
	}
	if g, w := fmt.Sprint(got), "[1:true:1 2:false:0 3:true:2 4:true:3 5:true:4]"; g != w {
		t.Errorf("Scan(headers) = %s; want %s", g, w)
	}
	last, ok, err := l.Last(ctx, sc.Dec(ds, subject.Committed))
	if err != nil || !ok || last.Version != 4 || last.Decision == nil {
		t.Errorf("Last = %+v, %v, %v; want version 4 with body", last, ok, err)
	}
	if r, ok, err := l.Find(ctx, ds, "r-1", 1); err != nil || !ok || r.Seq != 2 || r.Decision.GetReason() != cellguardpb.Reason_PRECONDITION_FAILED {
		t.Errorf("Find(r-1) = %+v, %v, %v; want the rejection at 2", r, ok, err)
	}
	if _, ok, err := l.Find(ctx, ds, "nobody", 1); err != nil || ok {
		t.Errorf("Find(nobody) = %v, %v; want not found", ok, err)
	}
	if seq, err := l.VersionSeq(ctx, ds, 3); err != nil || seq != 4 {
		t.Errorf("VersionSeq(3) = %d, %v; want 4", seq, err)
	}
	m3, seq, err := l.Load(ctx, ds, 3, nil)
	if err != nil || m3.Version() != 3 || seq != 4 || m3.NumFragments() != 3 {
		t.Fatalf("Load(3) = %v, %d, %v; want version 3 with 3 fragments at 4", m3, seq, err)
	}

	// A trusted checkpoint at 3 is used; Load(4) replays one record.
	if err := l.WriteCheckpoint(ctx, declog.Checkpoint{Dataset: ds, Manifest: m3, DecSeq: 4, TxnSeq: 3}); err != nil {
		t.Fatal(err)
	}
	cp, ok, err := l.Checkpoint(ctx, ds, 4)
	if err != nil || !ok || cp.Version != 3 || cp.DecSeq != 4 {
		t.Fatalf("Checkpoint(4) = %+v, %v, %v; want version 3 at 4", cp, ok, err)
	}
	if cp, ok, err := l.Checkpoint(ctx, ds, math.MaxUint64); err != nil || !ok || cp.Version != 3 {
		t.Fatalf("Checkpoint(MaxUint64) = %+v, %v, %v; want the newest, version 3", cp, ok, err)
	}
	m4, seq, err := l.Load(ctx, ds, 0, nil)
	if err != nil || m4.Version() != 4 || seq != 5 {
		t.Fatalf("Load(latest) = %v, %d, %v; want version 4 at 5", m4, seq, err)
	}
	if _, _, err := l.Load(ctx, ds, 9, nil); !errors.Is(err, declog.ErrNoVersion) {
		t.Errorf("Load(9) = %v; want ErrNoVersion", err)
	}
	if _, _, err := l.Load(ctx, "nothing", 0, nil); !errors.Is(err, declog.ErrNoDataset) {
		t.Errorf("Load(unknown dataset) = %v; want ErrNoDataset", err)
	}
}

// TestUntrustedCheckpoint: a checkpoint whose log sequence is not its
// version's committed record is refused, and Load replays from the start.
func TestUntrustedCheckpoint(t *testing.T) {
	l, _, _ := openLog(t)
	ctx := t.Context()
	ds := "lies"
	var expect uint64
	for v := uint64(1); v <= 2; v++ {
		s, err := l.Append(ctx, ds, expect, []*cellguardpb.Decision{committed(t, ds, v)})
		if err != nil {
			t.Fatal(err)
		}
		expect = s[0]
	}
	m1, _, err := l.Load(ctx, ds, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Claims version 1 sits at sequence 2, where version 2 is.
	if err := l.WriteCheckpoint(ctx, declog.Checkpoint{Dataset: ds, Manifest: m1, DecSeq: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ReadCheckpoint(ctx, ds, 1); !errors.Is(err, declog.ErrUntrustedCheckpoint) {
		t.Errorf("ReadCheckpoint(lying) = %v; want ErrUntrustedCheckpoint", err)
	}
	m2, seq, err := l.Load(ctx, ds, 2, nil)
	if err != nil || m2.Version() != 2 || seq != 2 {
		t.Errorf("Load(2) past a lying checkpoint = %v, %d, %v; want version 2 at 2", m2, seq, err)
	}
}

// TestReplayChecksVersion: a record that does not follow the manifest
// is refused, not applied.
func TestReplayChecksVersion(t *testing.T) {
	r := declog.Record{Seq: 7, Dataset: "ds", Outcome: cellguardpb.Outcome_OUTCOME_COMMITTED, Version: 2, Decision: committed(t, "ds", 2)}
	if _, _, err := declog.Replay(t.Context(), nil, r, nil); err == nil {
		t.Error("Replay(nil, version 2) = nil error; want a version mismatch")
	}
	r1 := declog.Record{Seq: 1, Dataset: "ds", Outcome: cellguardpb.Outcome_OUTCOME_COMMITTED, Version: 1, Decision: committed(t, "ds", 1)}
	m, txn, err := declog.Replay(t.Context(), nil, r1, nil)
	if err != nil || m.Version() != 1 || txn.GetUuid() != r1.Decision.GetTxnUuid() {
		t.Errorf("Replay(nil, version 1) = %v, %v, %v; want version 1", m, txn, err)
	}
}

// TestParseRefusesMismatchedBody: a body that names another dataset or
// outcome than its subject is a malformed record.
func TestParseRefusesMismatchedBody(t *testing.T) {
	sc, _ := subject.NewScheme("")
	msg, err := declog.Message(sc, rejected("a", "x", 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := declog.Parse(sc, 1, sc.Dec("b", subject.Rejected), msg.Header, msg.Data); !errors.Is(err, declog.ErrMalformedRecord) {
		t.Errorf("Parse(body of a on subject of b) = %v; want ErrMalformedRecord", err)
	}
	r, err := declog.Parse(sc, 1, msg.Subject, msg.Header, nil)
	if err != nil || r.TxnID != "x" || r.Committed() || r.Decision != nil {
		t.Errorf("Parse(headers only) = %+v, %v; want rejected x without body", r, err)
	}
}

// TestAppendEncoded appends decisions encoded once, in a batch and alone,
// and checks that the log stores exactly the bytes given; a fenced
// attempt and its retry send the same bytes.
func TestAppendEncoded(t *testing.T) {
	l, js, sc := openLog(t)
	ctx := t.Context()
	ds := "encoded"
	var encs []declog.Encoded
	for _, d := range []*cellguardpb.Decision{committed(t, ds, 1), rejected(ds, "r-1", 2), committed(t, ds, 2)} {
		e, err := declog.Encode(d)
		if err != nil {
			t.Fatal(err)
		}
		encs = append(encs, e)
	}
	if _, err := l.AppendEncoded(ctx, ds, 7, encs[:2]); !errors.Is(err, declog.ErrFenced) {
		t.Fatalf("AppendEncoded(stale expect) = %v; want ErrFenced", err)
	}
	seqs, err := l.AppendEncoded(ctx, ds, 0, encs[:2])
	if err != nil {
		t.Fatal(err)
	}
	more, err := l.AppendEncoded(ctx, ds, seqs[1], []declog.Encoded{encs[2], {Decision: rejected(ds, "r-2", 3)}})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, sc.DecStream())
	if err != nil {
		t.Fatal(err)
	}
	for i, seq := range append(seqs, more...) {
		msg, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		var want []byte
		if i < len(encs) {
			want = encs[i].Body
		} else if want, err = proto.Marshal(rejected(ds, "r-2", 3)); err != nil { // encoded by AppendEncoded
			t.Fatal(err)
		}
		if string(msg.Data) != string(want) {
			t.Errorf("record %d: stored body differs from the encoded one", seq)
		}
		r, err := declog.Parse(sc, seq, msg.Subject, msg.Header, msg.Data)
		if err != nil {
			t.Fatalf("record %d: %v", seq, err)
		}
		if i < len(encs) && !proto.Equal(r.Decision, encs[i].Decision) {
			t.Errorf("record %d = %v; want %v", seq, r.Decision, encs[i].Decision)
		}
	}
}

// TestDirectObjectReads: with Options.FullAPI a log lists and reads
// checkpoints without nats.go's object reads, and finds what they find:
// a checkpoint of several chunks, one of a second dataset, none of a
// deleted one.
func TestDirectObjectReads(t *testing.T) {
	plain, js, sc := openLog(t)
	ctx := t.Context()
	dec, err := js.Stream(ctx, sc.DecStream())
	if err != nil {
		t.Fatal(err)
	}
	obj, err := js.ObjectStore(ctx, sc.CheckpointBucket())
	if err != nil {
		t.Fatal(err)
	}
	direct := declog.New(js, sc, dec, obj, declog.Options{FullAPI: true})
	heads := map[string]uint64{}
	for _, ds := range []string{"big", "small", "gone"} {
		n := uint64(2)
		if ds == "big" {
			n = 3000 // a manifest of ~300 KB: several 128 KiB chunks
		}
		seqs, err := plain.Append(ctx, ds, 0, []*cellguardpb.Decision{committed(t, ds, 1)})
		if err != nil {
			t.Fatal(err)
		}
		expect := seqs[0]
		for v := uint64(2); v <= n; v += 200 {
			var batch []*cellguardpb.Decision
			for u := v; u < min(v+200, n+1); u++ {
				batch = append(batch, committed(t, ds, u))
			}
			s, err := plain.Append(ctx, ds, expect, batch)
			if err != nil {
				t.Fatal(err)
			}
			expect = s[len(s)-1]
		}
		m, seq, err := plain.Load(ctx, ds, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := plain.WriteCheckpoint(ctx, declog.Checkpoint{Dataset: ds, Manifest: m, DecSeq: seq, TxnSeq: n}); err != nil {
			t.Fatal(err)
		}
		heads[ds] = m.Version()
	}
	if err := plain.DeleteCheckpoint(ctx, "gone", heads["gone"]); err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]*declog.Log{"nats.go": plain, "direct": direct} {
		vs, err := l.CheckpointVersions(ctx)
		if err != nil {
			t.Fatalf("%s: CheckpointVersions: %v", name, err)
		}
		if got, want := fmt.Sprint(vs), fmt.Sprintf("map[big:[%d] small:[%d]]", heads["big"], heads["small"]); got != want {
			t.Errorf("%s: CheckpointVersions = %s, want %s", name, got, want)
		}
		for _, ds := range []string{"big", "small"} {
			cp, ok, err := l.Checkpoint(ctx, ds, math.MaxUint64)
			if err != nil || !ok || cp.Version != heads[ds] || cp.Manifest.NumFragments() != int(heads[ds]) {
				t.Errorf("%s: Checkpoint(%s) = version %d, %v, %v; want version %d with as many fragments", name, ds, cp.Version, ok, err, heads[ds])
			}
		}
	}
}

// TestRecordsCarryTheirTime: every read (a scan, the last record, one by
// sequence) gives a record the time the log stored it, not the time it
// was read.
func TestRecordsCarryTheirTime(t *testing.T) {
	l, _, sc := openLog(t)
	ctx := t.Context()
	before := time.Now()
	seqs, err := l.Append(ctx, "timed", 0, []*cellguardpb.Decision{committed(t, "timed", 1)})
	if err != nil {
		t.Fatal(err)
	}
	stored := time.Now()
	time.Sleep(1100 * time.Millisecond)
	check := func(how string, r declog.Record) {
		t.Helper()
		// The server's clock is this machine's: the record's time lies
		// between the append's start and its answer (1 ms of slack).
		if r.Time.Before(before.Add(-time.Millisecond)) || r.Time.After(stored.Add(time.Millisecond)) {
			t.Errorf("%s: record time %v, want between %v and %v", how, r.Time, before, stored)
		}
	}
	for r, err := range l.Scan(ctx, sc.DecOf("timed"), 1, declog.ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		check("Scan", r)
	}
	last, ok, err := l.Last(ctx, sc.DecOf("timed"))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	check("Last", last)
	at, err := l.At(ctx, seqs[0])
	if err != nil {
		t.Fatal(err)
	}
	check("At", at)
}
