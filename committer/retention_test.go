package committer

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/natstest"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// retentionConfig keeps 30 records per decision-log subject, with a
// checkpoint every 10 versions.
func retentionConfig() Config {
	cfg := testConfig()
	cfg.BatchSize, cfg.CheckpointEvery, cfg.MaxReadLag, cfg.DecisionsPerSubject, cfg.KeepCheckpoints = 8, 10, 20, 30, 2
	return cfg
}

// lastDecision returns the newest decision of ds, nil if none.
func lastDecision(t *testing.T, js jetstream.JetStream, ds string) *cellguardpb.Decision {
	t.Helper()
	l := readLog(t, js, ds)
	if len(l) == 0 {
		return nil
	}
	return l[len(l)-1].rec
}

// waitVersion waits until ds's newest decision commits version v.
func waitVersion(t *testing.T, js jetstream.JetStream, ds string, v uint64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := lastDecision(t, js, ds)
		if r != nil && r.Version >= v {
			if r.Version != v || r.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED {
				t.Fatalf("newest decision %v, want version %d committed", r, v)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("version %d not committed; newest decision %v", v, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stageAppends stages n appends, each reading the version the previous
// one commits, starting after head.
func stageAppends(t *testing.T, js jetstream.JetStream, ds string, head uint64, n int) {
	for i := range n {
		id := newUUID()
		stage(t, js, ds, id, mustMarshal(t, appendTxn(id, head+uint64(i))))
	}
}

// TestDecisionLogRetention: the decision log keeps a bounded number of
// records per dataset, the committer still rebuilds the state after a
// restart from a checkpoint and the retained tail, old checkpoints are
// pruned, and the log is protected against deletes and purges.
func TestDecisionLogRetention(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := retentionConfig()
	r := start(t, srv.URL(), cfg)
	ds := "kept"
	create := newUUID()
	stage(t, js, ds, create, mustMarshal(t, createTxn(create)))
	stageAppends(t, js, ds, 1, 99)
	waitVersion(t, js, ds, 100)
	var sc subject.Scheme
	dec, err := js.Stream(t.Context(), sc.DecStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := dec.Info(t.Context(), jetstream.WithSubjectFilter(sc.Dec(ds, subject.Committed)))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[sc.Dec(ds, subject.Committed)]; n > 30 {
		t.Errorf("committed subject holds %d records, want ≤ 30", n)
	}
	if !info.Config.DenyDelete || !info.Config.DenyPurge {
		t.Errorf("decision log deny delete %v, deny purge %v; want both", info.Config.DenyDelete, info.Config.DenyPurge)
	}
	if err := dec.DeleteMsg(t.Context(), info.State.LastSeq); err == nil {
		t.Error("deleting a decision record succeeded")
	}
	if err := dec.Purge(t.Context()); err == nil {
		t.Error("purging the decision log succeeded")
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	// Restart: the log no longer begins at version 1.
	r = start(t, srv.URL(), cfg)
	stageAppends(t, js, ds, 100, 1)
	waitVersion(t, js, ds, 101)
	if vs := checkpointVersions(t, r.c, ds); len(vs) > cfg.KeepCheckpoints+1 {
		t.Errorf("checkpoints %v, want at most %d kept", vs, cfg.KeepCheckpoints)
	}
}

func checkpointVersions(t *testing.T, c *Committer, ds string) []uint64 {
	t.Helper()
	all, err := c.dl.CheckpointVersions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return all[ds]
}

// TestRetentionWaitsForCheckpoint: while checkpoints cannot be written,
// the committer stops committing before the log's retention would drop
// the newest checkpoint's record, and resumes once one is written. No
// state is ever lost: a committer started afterwards loads it.
func TestRetentionWaitsForCheckpoint(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := retentionConfig()
	var blocked atomic.Bool
	var skipped atomic.Int64
	cfg.hook = func(s Step, _ string) error {
		if s == StepCheckpoint && blocked.Load() {
			skipped.Add(1)
			return errors.New("checkpoint store unavailable")
		}
		return nil
	}
	r := start(t, srv.URL(), cfg)
	ds := "held"
	create := newUUID()
	stage(t, js, ds, create, mustMarshal(t, createTxn(create)))
	stageAppends(t, js, ds, 1, 9)
	waitVersion(t, js, ds, 10)
	deadline := time.Now().Add(30 * time.Second)
	for len(checkpointVersions(t, r.c, ds)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint at version 10")
		}
		time.Sleep(20 * time.Millisecond)
	}
	blocked.Store(true)
	stageAppends(t, js, ds, 10, 40) // up to version 50; retention allows < 10+30
	// Versions up to 39 keep checkpoint 10's record among the newest 30;
	// 40 would not. A batch (of up to 8) that would pass 39 is held back,
	// and the committer asks for checkpoints.
	for skipped.Load() < 3 || lastDecision(t, js, ds).GetVersion() < 40-8 {
		if time.Now().After(deadline) {
			t.Fatalf("committer never asked for a checkpoint; newest %v", lastDecision(t, js, ds))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v := lastDecision(t, js, ds).GetVersion(); v >= 40 {
		t.Fatalf("committed version %d with checkpoint 10 and 30 records kept", v)
	}
	st := loadForTest(t, srv.URL(), cfg, ds) // the state can be rebuilt meanwhile
	if st.HeadVersion() < 10 || st.HeadVersion() >= 40 {
		t.Errorf("rebuilt head %d while held back", st.HeadVersion())
	}
	blocked.Store(false)
	waitVersion(t, js, ds, 50)
	_ = r.stop(t)
	if st := loadForTest(t, srv.URL(), cfg, ds); st.HeadVersion() != 50 {
		t.Errorf("rebuilt head %d, want 50", st.HeadVersion())
	}
}

func TestRetentionConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"retention without checkpoints":    {CheckpointEvery: -1, DecisionsPerSubject: 1000},
		"retention within the read lag":    {MaxReadLag: 500, DecisionsPerSubject: 500},
		"retention under two checkpoints":  {CheckpointEvery: 1000, MaxReadLag: 100, DecisionsPerSubject: 1500},
		"change index too small to be any": {IndexBytes: 100},
	} {
		if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidConfig", name, err)
		}
	}
	d := Config{}.withDefaults()
	if d.DecisionsPerSubject != 200000 || d.MaxRebaseLag != 1000 || d.KeepCheckpoints != 10 {
		t.Errorf("defaults: retention %d, rebase lag %d, checkpoints kept %d", d.DecisionsPerSubject, d.MaxRebaseLag, d.KeepCheckpoints)
	}
	if d := (Config{CheckpointEvery: -1}).withDefaults(); d.DecisionsPerSubject >= 0 {
		t.Errorf("without checkpoints the log keeps everything; retention %d", d.DecisionsPerSubject)
	}
	_, dec := StreamConfigs(Config{})
	if !dec.DenyDelete || !dec.DenyPurge || dec.MaxMsgsPerSubject != 200000 {
		t.Errorf("decision log config: deny delete %v, deny purge %v, per subject %d", dec.DenyDelete, dec.DenyPurge, dec.MaxMsgsPerSubject)
	}
	small := dec
	small.MaxMsgsPerSubject = 10
	if err := verifyStream(small, dec); !errors.Is(err, ErrStreamMismatch) {
		t.Errorf("decision log keeping fewer records than configured: %v, want ErrStreamMismatch", err)
	}
}
