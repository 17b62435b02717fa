package declog_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
	"cellguard/internal/natstest"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// TestScansReadAgainAtTheLeaderPastAReplicaHole: the log of "ds" holds
// versions 1..40 at the stream leader, and the copy that answers every
// direct get lacks versions 15..25, as a replica whose block file was
// damaged does (the stream on one node, a mirror answering its direct
// gets on another, the records deleted from the mirror). Every reader
// hands out the whole history: bounded scans with bodies and headers
// only (each having read again at the leader), Load, VersionSeq, and a
// live scan.
func TestScansReadAgainAtTheLeaderPastAReplicaHole(t *testing.T) {
	var tags []string
	c := natstest.RunCluster(t, 3, func(o *server.Options) {
		o.Tags = []string{fmt.Sprintf("node:%d", len(tags))}
		tags = append(tags, o.Tags[0])
	})
	_, js := natstest.Connect(t, c.Servers[0].URL())
	ctx := t.Context()
	sc, _ := subject.NewScheme("")
	dec, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: sc.DecStream(), Subjects: []string{sc.DecAll()},
		AllowDirect: true, AllowAtomicPublish: true, Placement: &jetstream.Placement{Tags: []string{tags[0]}}})
	if err != nil {
		t.Fatal(err)
	}
	w := declog.New(js, sc, dec, nil, declog.Options{})
	var last uint64
	seqOf := map[uint64]uint64{}
	for v := uint64(1); v <= 40; v++ {
		decs := []*cellguardpb.Decision{committed(t, "ds", v)}
		if v%4 == 0 {
			decs = append(decs, rejected("ds", fmt.Sprintf("r-%d", v), 100+v))
		}
		seqs, err := w.Append(ctx, "ds", last, decs)
		if err != nil {
			t.Fatal(err)
		}
		seqOf[v], last = seqs[0], seqs[len(seqs)-1]
	}
	mir, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "CG_DEC_COPY", Mirror: &jetstream.StreamSource{Name: sc.DecStream()},
		AllowDirect: true, MirrorDirect: true, Placement: &jetstream.Placement{Tags: []string{tags[1]}}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		mi, err := mir.Info(ctx)
		if err == nil && mi.State.LastSeq == last {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for s := seqOf[15]; s <= seqOf[25]; s++ {
		if err := mir.DeleteMsg(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	cfg := dec.CachedInfo().Config
	cfg.AllowDirect = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	_, rjs := natstest.Connect(t, c.Servers[1].URL())
	rdec, err := rjs.Stream(ctx, sc.DecStream())
	if err != nil {
		t.Fatal(err)
	}
	l := declog.New(rjs, sc, rdec, nil, declog.Options{RequestTimeout: 5 * time.Second})

	versions := func(filter string, opts declog.ScanOptions) string {
		var vs []string
		for r, err := range l.Scan(ctx, filter, 1, opts) {
			if err != nil {
				t.Fatalf("scan %s: %v", filter, err)
			}
			if r.Committed() {
				vs = append(vs, fmt.Sprint(r.Version))
			}
		}
		return strings.Join(vs, " ")
	}
	var all []string
	for v := 1; v <= 40; v++ {
		all = append(all, fmt.Sprint(v))
	}
	want := strings.Join(all, " ")
	for _, opts := range []declog.ScanOptions{{}, {HeadersOnly: true}} {
		before := l.Rereads()
		if got := versions(sc.DecOf("ds"), opts); got != want {
			t.Errorf("scan %+v: versions %s, want %s", opts, got, want)
		}
		if l.Rereads() == before {
			t.Errorf("scan %+v: no re-read at the leader (did the replica answer?)", opts)
		}
	}
	if got := versions(sc.Dec("ds", subject.Committed), declog.ScanOptions{AtLeader: true}); got != want {
		t.Errorf("scan at the leader: %s", got)
	}
	m, seq, err := l.Load(ctx, "ds", 40, nil)
	if err != nil || m.Version() != 40 || seq != seqOf[40] {
		t.Errorf("Load(40) = %v, %d, %v", m, seq, err)
	}
	if seq, err := l.VersionSeq(ctx, "ds", 20); err != nil || seq != seqOf[20] {
		t.Errorf("VersionSeq(20) = %d, %v; want %d", seq, err, seqOf[20])
	}
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var live []string
	for r, err := range l.Scan(lctx, sc.Dec("ds", subject.Committed), 1, declog.ScanOptions{Live: true}) {
		if err != nil {
			t.Fatalf("live scan: %v", err)
		}
		if live = append(live, fmt.Sprint(r.Version)); len(live) == 40 {
			break
		}
	}
	if got := strings.Join(live, " "); got != want {
		t.Errorf("live scan: %s", got)
	}
}

// TestScansHandOutAHoleTheLeaderHasToo: where the stream leader's log
// has the gap too, a scan hands the records out as they are, and the
// readers that check versions refuse them.
func TestScansHandOutAHoleTheLeaderHasToo(t *testing.T) {
	l, _, sc := openLog(t)
	ctx := t.Context()
	var last uint64
	for _, v := range []uint64{1, 2, 3, 5} {
		seqs, err := l.Append(ctx, "ds", last, []*cellguardpb.Decision{committed(t, "ds", v)})
		if err != nil {
			t.Fatal(err)
		}
		last = seqs[0]
	}
	var got []uint64
	for r, err := range l.Scan(ctx, sc.DecOf("ds"), 1, declog.ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.Version)
	}
	if fmt.Sprint(got) != "[1 2 3 5]" || l.Rereads() != 1 {
		t.Errorf("scan: versions %v after %d re-reads, want [1 2 3 5] after 1", got, l.Rereads())
	}
	if _, _, err := l.Load(ctx, "ds", 5, nil); err == nil || !strings.Contains(err.Error(), "has version 5, want 4") {
		t.Errorf("Load(5) = %v, want the gap refused", err)
	}
}
