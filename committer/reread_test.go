package committer

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"cellguard/internal/declog"
	"cellguard/internal/natstest"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// holeyReplica makes the direct gets of CG_DEC answer from a copy that
// lacks the records with sequences lost[0]..lost[1], while the stream
// leader keeps them: what a replica whose block file was damaged serves
// (JetStream does not repair it; the nemesis shows it). The copy is a
// mirror of CG_DEC on another node of the cluster, which JetStream lets
// answer the stream's direct gets (MirrorDirect); the records are deleted
// from it, and CG_DEC's own replicas stop answering direct gets, so every
// direct get reads the copy. It returns the URL of the copy's node.
func holeyReplica(t *testing.T, c *natstest.Cluster, js jetstream.JetStream, tags []string, lost [2]uint64) string {
	t.Helper()
	ctx := t.Context()
	var sc subject.Scheme
	dec, err := js.Stream(ctx, sc.DecStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := dec.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	at := -1
	for i, s := range c.Servers {
		if s.Name() != info.Cluster.Leader {
			at = i
			break
		}
	}
	mir, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "CG_DEC_COPY", Mirror: &jetstream.StreamSource{Name: sc.DecStream()},
		AllowDirect: true, MirrorDirect: true, Placement: &jetstream.Placement{Tags: []string{tags[at]}},
	})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mi, err := mir.Info(ctx)
		if err == nil && mi.State.LastSeq == info.State.LastSeq {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("mirror not caught up: %+v, %v", mi, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for s := lost[0]; s <= lost[1]; s++ {
		if err := mir.DeleteMsg(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	cfg := info.Config
	cfg.AllowDirect = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	return c.Servers[at].URL()
}

// TestDecidesAcrossAReplicaThatLostRecords: a committer whose reads of
// the log are served by a replica that lost records in the middle of a
// dataset's history (its load crosses the hole) reads them again at the
// stream leader, loads the dataset and decides the next version; it does
// not stop the dataset as untrusted.
func TestDecidesAcrossAReplicaThatLostRecords(t *testing.T) {
	var tags []string
	c := natstest.RunCluster(t, 3, func(o *server.Options) {
		o.Tags = []string{fmt.Sprintf("node:%d", len(tags))}
		tags = append(tags, o.Tags[0])
	})
	_, js := natstest.Connect(t, c.URLs())
	cfg := testConfig()
	cfg.CheckpointEvery = 0 // a load reads the whole log, across the hole
	ensureStreamsFor(t, js, cfg)
	r := start(t, c.URLs(), cfg)
	const ds = "cities"
	id := newUUID()
	stage(t, js, ds, id, mustMarshal(t, createTxn(id)))
	waitDecided(t, js, ds, 1, 20*time.Second)
	for v := uint64(1); v < 30; v++ {
		id := newUUID()
		stage(t, js, ds, id, mustMarshal(t, appendTxn(id, v)))
		waitDecided(t, js, ds, int(v)+1, 20*time.Second)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	l := readLog(t, js, ds)
	url := holeyReplica(t, c, js, tags, [2]uint64{l[10].seq, l[20].seq})

	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	r = start(t, url, cfg)
	id = newUUID()
	stage(t, js, ds, id, mustMarshal(t, appendTxn(id, 30)))
	l = waitDecided(t, js, ds, 31, 30*time.Second)
	if got := l[30].rec; got.TxnUuid != id || got.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED || got.Version != 31 {
		t.Errorf("decision after the hole: %v, want %s committed as version 31", got, id)
	}
	for _, s := range r.c.DatasetStatuses() {
		if s.Dataset == ds && s.State == DatasetStopped {
			t.Errorf("dataset stopped: %+v", s)
		}
	}
	if n := testutil.ToFloat64(r.c.metrics.leaderRereads); n < 1 {
		t.Errorf("leader re-reads = %v, want at least 1 (did the load read the replica with the hole?)", n)
	}
	checkLog(t, l, nil)
}

// TestVersionGapAtTheLeaderStopsItsDataset: a committed record whose
// version skips one is refused when the stream leader's log holds it
// too: the dataset stops as untrusted, once, as without any re-read.
func TestVersionGapAtTheLeaderStopsItsDataset(t *testing.T) {
	rig := newPoisonRig(t)
	var sc subject.Scheme
	id := newUUID()
	m, err := declog.Message(sc, &cellguardpb.Decision{
		Dataset: "poison", TxnUuid: id, TxnSeq: 1, Outcome: cellguardpb.Outcome_OUTCOME_COMMITTED,
		Version: 3, ReadVersion: 1, HeadVersion: 1, Transaction: mustMarshal(t, appendTxn(id, 1)),
	})
	if err != nil {
		t.Fatal(err)
	}
	rig.forge(t, m)
	rig.check(t, false, id)
}

// TestVersionGapOnEveryReplicaStopsItsDataset: on a 3-node cluster, a
// committed record whose version skips one, held by every replica, is
// read again at the leader, then at the other replicas made leader in
// turn (a stepdown each), and the dataset stops as untrusted: bounded,
// with its staged message not acked.
func TestVersionGapOnEveryReplicaStopsItsDataset(t *testing.T) {
	c := natstest.RunCluster(t, 3)
	_, js := natstest.Connect(t, c.URLs())
	cfg := testConfig()
	cfg.Replicas = 3
	ensureStreamsFor(t, js, cfg)
	r := start(t, c.URLs(), cfg)
	id := newUUID()
	stage(t, js, "poison", id, mustMarshal(t, createTxn(id)))
	waitDecided(t, js, "poison", 1, 30*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	var sc subject.Scheme
	forged := newUUID()
	m, err := declog.Message(sc, &cellguardpb.Decision{
		Dataset: "poison", TxnUuid: forged, TxnSeq: 1, Outcome: cellguardpb.Outcome_OUTCOME_COMMITTED,
		Version: 3, ReadVersion: 1, HeadVersion: 1, Transaction: mustMarshal(t, appendTxn(forged, 1)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	logs := &countingHandler{n: map[string]int{"dataset stopped": 0, "the stream leader's records": 0}}
	cfg.Logger = slog.New(logs)
	r = start(t, c.URLs(), cfg)
	txnStream, err := js.Stream(t.Context(), sc.TxnStream())
	if err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(t.Context(), sc.Txn("poison"), mustMarshal(t, appendTxn(newUUID(), 1)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	var st DatasetStatus
	for st.State != DatasetStopped && time.Now().Before(deadline) {
		for _, s := range r.c.DatasetStatuses() {
			if s.Dataset == "poison" {
				st = s
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st.State != DatasetStopped || st.Reason != reasonUntrustedLog {
		t.Fatalf("status %+v, want stopped (%s)", st, reasonUntrustedLog)
	}
	if n := logs.count("the stream leader's records"); n < 1 || n > 2 {
		t.Errorf("%d stepdowns asked for, want 1 or 2 (one per other replica)", n)
	}
	if n := logs.count("dataset stopped"); n != 1 {
		t.Errorf("%d 'dataset stopped' logs, want 1", n)
	}
	if _, err := txnStream.GetMsg(t.Context(), ack.Sequence); err != nil {
		t.Errorf("the staged message %d is gone: %v", ack.Sequence, err)
	}
}
