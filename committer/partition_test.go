package committer

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/natstest"
	"cellguard/internal/subject"
)

// consumerNames lists CG_TXN's consumers.
func consumerNames(t testing.TB, js jetstream.JetStream) map[string]time.Time {
	t.Helper()
	s, err := js.Stream(t.Context(), "CG_TXN")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	l := s.ListConsumers(t.Context())
	for ci := range l.Info() {
		out[ci.Name] = ci.Created
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// stageMany stages, interleaved, a create and appends for each dataset,
// and returns each dataset's uuids in staging order.
func stageMany(t testing.TB, js jetstream.JetStream, datasets []string, appends int) map[string][]string {
	t.Helper()
	ids := map[string][]string{}
	for i := 0; i <= appends; i++ {
		for _, ds := range datasets {
			id := newUUID()
			body := mustMarshal(t, appendTxn(id, 1))
			if i == 0 {
				body = mustMarshal(t, createTxn(id))
			}
			stage(t, js, ds, id, body)
			ids[ds] = append(ids[ds], id)
		}
	}
	return ids
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%03d", prefix, i)
	}
	return out
}

// TestPartitionedStaging: many datasets share a few partition consumers;
// each dataset's transactions are decided exactly once, in staging
// order; the consumers are the partitions' and nothing per dataset; a
// restart creates no consumer.
func TestPartitionedStaging(t *testing.T) {
	srv := runServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	cfg.Partitions = 4
	r := start(t, srv.URL(), cfg)
	datasets := names("many", 40)
	ids := stageMany(t, js, datasets, 3)
	for _, ds := range datasets {
		checkLog(t, waitDecided(t, js, ds, len(ids[ds]), 30*time.Second), ids[ds])
	}
	before := consumerNames(t, js)
	var want []string
	for k := range 4 {
		want = append(want, fmt.Sprintf("partition-4-%d", k))
	}
	got := make([]string, 0, len(before))
	for n := range before {
		got = append(got, n)
	}
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Fatalf("consumers %v, want the partitions' %v", got, want)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	start(t, srv.URL(), cfg)
	more := stageMany(t, js, datasets[:5], 1)
	for _, ds := range datasets[:5] {
		all := append(ids[ds], more[ds][1:]...) // the second create is rejected, not committed: check the appends
		l := waitDecided(t, js, ds, len(all)+1, 30*time.Second)
		if len(l) != len(all)+1 {
			t.Fatalf("%s: %d decisions, want %d", ds, len(l), len(all)+1)
		}
	}
	after := consumerNames(t, js)
	for n, created := range before {
		if !after[n].Equal(created) {
			t.Errorf("consumer %s re-created by the restart (%v → %v)", n, created, after[n])
		}
	}
	if len(after) != len(before) {
		t.Errorf("restart changed the consumers: %v → %v", before, after)
	}
}

// TestWildcardSubjectsStayOutOfPartitions: a literal "*" or ">" token is
// not transformed by the server, so it never lands in a partition; the
// stray sweep rejects it, and the datasets around it decide as usual.
func TestWildcardSubjectsStayOutOfPartitions(t *testing.T) {
	srv := runServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	cfg.Partitions = 2
	ensureStreamsFor(t, js, cfg)
	for _, tok := range []string{"*", ">"} {
		if _, err := js.Publish(t.Context(), "cg.txn."+tok, []byte("junk")); err != nil {
			t.Fatal(err)
		}
	}
	s, err := js.Stream(t.Context(), "CG_TXN")
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 2; seq++ {
		m, err := s.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := (subject.Scheme{}).ParsePartitioned(m.Subject); err == nil {
			t.Errorf("wildcard message stored as %s, inside a partition", m.Subject)
		}
	}
	start(t, srv.URL(), cfg)
	ids := stageMany(t, js, []string{"beside"}, 2)
	checkLog(t, waitDecided(t, js, "beside", 3, 20*time.Second), ids["beside"])
	waitDecided(t, js, subject.StrayDataset, 2, 20*time.Second)
}

// TestUnpartitionedStreamUpgrade: a stream of the one-consumer-per-
// dataset layout, with messages staged and a per-dataset consumer
// holding some, is partitioned at start; its old consumer is deleted;
// the old messages are decided in order before the new ones.
func TestUnpartitionedStreamUpgrade(t *testing.T) {
	srv := runServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	cfg.Partitions = 3
	txnCfg, _ := StreamConfigs(cfg)
	txnCfg.SubjectTransform = nil
	ensureStreamsFor(t, js, cfg)
	if _, err := js.UpdateStream(t.Context(), txnCfg); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), "CG_TXN")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateOrUpdateConsumer(t.Context(), jetstream.ConsumerConfig{
		Durable: "commit-old", FilterSubject: "cg.txn.old", AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	old := stageMany(t, js, []string{"old", "other"}, 3)
	if m, _ := s.GetMsg(t.Context(), 1); m == nil || m.Subject != "cg.txn.old" {
		t.Fatalf("first message stored as %v, want the unpartitioned subject", m)
	}
	start(t, srv.URL(), cfg)
	newer := stageMany(t, js, []string{"old"}, 2)
	all := append(old["old"], newer["old"][1:]...)
	l := waitDecided(t, js, "old", len(all)+1, 30*time.Second)
	var committed []string
	for _, e := range l {
		if e.rec.Version > 0 {
			committed = append(committed, e.rec.TxnUuid)
		}
	}
	if !slices.Equal(committed, all) {
		t.Errorf("committed %v, want in staging order %v", committed, all)
	}
	checkLog(t, waitDecided(t, js, "other", 4, 30*time.Second), old["other"])
	if _, ok := consumerNames(t, js)["commit-old"]; ok {
		t.Error("the per-dataset consumer of the old layout is still there")
	}
}

// TestRepartitionKeepsOrder: messages staged under 2 partitions wait
// while the count changes to 5 and more are staged; a committer decides
// every dataset's messages in staging order across both counts and
// deletes the old partitions' consumers once drained.
func TestRepartitionKeepsOrder(t *testing.T) {
	srv := runServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	cfg.Partitions = 2
	r := start(t, srv.URL(), cfg)
	datasets := names("rp", 12)
	first := stageMany(t, js, datasets, 0)
	for _, ds := range datasets {
		waitDecided(t, js, ds, 1, 30*time.Second)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	before := stageMany(t, js, datasets, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := SetPartitionCount(ctx, js, "cg", 5); err != nil {
		t.Fatal(err)
	}
	if n, err := PartitionCount(ctx, js, "cg"); err != nil || n != 5 {
		t.Fatalf("PartitionCount = %d, %v; want 5", n, err)
	}
	after := stageMany(t, js, datasets, 2)
	start(t, srv.URL(), cfg) // configured with 2: the stream's 5 wins
	for _, ds := range datasets {
		want := append(append(append([]string{}, first[ds]...), before[ds][1:]...), after[ds][1:]...)
		l := waitDecided(t, js, ds, len(want)+2, 30*time.Second) // + two rejected creates
		var committed []string
		for _, e := range l {
			if e.rec.Version > 0 {
				committed = append(committed, e.rec.TxnUuid)
			}
		}
		if !slices.Equal(committed, want) {
			t.Fatalf("%s: committed %v, want in staging order %v", ds, committed, want)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		left := 0
		for n := range consumerNames(t, js) {
			if g, _, ok := subject.ParsePartitionConsumer(n); ok && g == 2 {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d consumers of the old partition count left after draining", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAssignPartitionsBalancedAndStable: every member gets ⌊P/n⌋ or
// ⌈P/n⌉ partitions, all members compute the same answer whatever order
// they list each other in, and a member joining moves partitions only
// to itself.
func TestAssignPartitionsBalancedAndStable(t *testing.T) {
	name := func(i int) string { return fmt.Sprintf("partition-64-%d", i) }
	members := []string{"c", "a", "b"}
	got := assignPartitions(64, members, name)
	again := assignPartitions(64, []string{"b", "c", "a"}, name)
	if !slices.Equal(got, again) {
		t.Fatal("assignment depends on the order members are listed in")
	}
	load := map[string]int{}
	for _, m := range got {
		load[m]++
	}
	for _, m := range members {
		if load[m] < 64/3 || load[m] > 64/3+1 {
			t.Errorf("member %s has %d partitions, want 21 or 22 (%v)", m, load[m], load)
		}
	}
	joined := assignPartitions(64, append(members, "d"), name)
	moved := 0
	for i := range got {
		if joined[i] != got[i] {
			moved++
		}
	}
	t.Logf("%d of 64 partitions moved when a fourth member joined", moved)
	if moved < 16 || moved > 40 {
		t.Errorf("%d partitions moved when a fourth member joined, want about a quarter", moved)
	}
}

// TestByDataset: a partition's batch splits into one group per dataset,
// in the order the datasets first appear, each sorted by stream
// sequence, every item in exactly one group; a batch of one dataset is
// one group, and an empty one none.
func TestByDataset(t *testing.T) {
	at := func(ds string, seq uint64) item { return item{staged: staged{Seq: seq}, ds: ds} }
	for _, c := range []struct {
		in   []item
		want [][]uint64
	}{
		{nil, nil},
		{[]item{at("a", 3), at("a", 1), at("a", 2)}, [][]uint64{{1, 2, 3}}},
		{[]item{at("b", 9), at("a", 4), at("b", 2), at("c", 7), at("a", 1), at("b", 5)}, [][]uint64{{2, 5, 9}, {1, 4}, {7}}},
	} {
		groups := byDataset(slices.Clone(c.in))
		var got [][]uint64
		for _, g := range groups {
			var seqs []uint64
			for _, it := range g {
				if it.ds != g[0].ds {
					t.Errorf("group of %s holds an item of %s", g[0].ds, it.ds)
				}
				seqs = append(seqs, it.Seq)
			}
			got = append(got, seqs)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("byDataset(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
