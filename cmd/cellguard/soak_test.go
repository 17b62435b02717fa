package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"cellguard/evaluator"
	"cellguard/internal/natstest"
	"cellguard/internal/subject"
	"cellguard/producer"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

var (
	soak         = flag.Bool("soak", false, "run the soak test (make test-long)")
	soakDuration = flag.Duration("soak.duration", 2*time.Minute, "how long the soak's workers run")
	soakKillEach = flag.Duration("soak.kill-every", 8*time.Second, "SIGKILL the serve process this often during the soak")
	soakLag      = flag.Int("soak.lag", 50000, "versions of history before the soak starts; stale readers read up to this far back")
	soakMaxGap   = flag.Duration("soak.maxgap", 0, "fail when decisions stop for longer than this outside restarts (0: only report)")
)

// soakWorkers is the number of SDK workers: writers and stale readers.
const (
	soakWriters = 6
	soakStale   = 2
	soakDS      = "soak"
)

// soakLog records what the workers staged.
type soakLog struct {
	mu     sync.Mutex
	ids    map[string]bool      // every uuid a worker staged or tried to
	staged map[string]time.Time // when each was first about to be staged
	lost   int                  // outcomes lost and re-committed
	stale  []uint64             // lags of the stale reads committed
}

func (l *soakLog) add(id string) {
	l.mu.Lock()
	l.ids[id] = true
	if _, ok := l.staged[id]; !ok {
		l.staged[id] = time.Now()
	}
	l.mu.Unlock()
}

// TestSoak is the long liveness and safety run of issue 9: 8 SDK workers
// (writers re-committing lost outcomes, stale readers at lags up to
// -soak.lag) against a real `serve` process that is SIGKILLed and
// restarted every -soak.kill-every. It reports the longest gap between
// consecutive decisions (overall, and outside the restart windows) and
// runs an oracle over the log: exactly one decision per staged uuid,
// versions contiguous, the replayed head equal to the reloaded one.
//
//	go test ./cmd/cellguard -run TestSoak -soak -soak.duration=5m -v
func TestSoak(t *testing.T) {
	if !*soak {
		t.Skip("long: run with -soak (make test-long)")
	}
	srv := natstest.RunServer(t)
	nc, js := natstest.Connect(t, srv.URL())
	args := soakArgs(srv.URL())
	cur, out := process(t, args...)
	waitOutput(t, out, "committer running")

	log := &soakLog{ids: map[string]bool{}, staged: map[string]time.Time{}}
	prefill(t, js, log, *soakLag)
	t.Logf("prefill: %d versions decided", *soakLag+1)

	pc, err := producer.New(nc, producer.Config{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	ctx, stop := context.WithTimeout(context.Background(), *soakDuration)
	defer stop()
	var wg sync.WaitGroup
	for i := range soakWriters + soakStale {
		wg.Go(func() { soakWorker(ctx, t, srv.URL(), i, i >= soakWriters, log) })
	}
	begin := time.Now()
	var kills []time.Time
	tick := time.NewTicker(*soakKillEach)
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
			kills = append(kills, time.Now())
			_ = cur.Process.Signal(syscall.SIGKILL)
			_ = cur.Wait()
			cur, out = process(t, args...)
		}
	}
	tick.Stop()
	wg.Wait()
	end := time.Now()
	decided := waitAllDecided(t, pc, log)
	soakOracle(t, log, decided)
	reportGaps(t, js, begin, end, kills, log)
	log.mu.Lock()
	t.Logf("%d uuids staged, %d lost outcomes re-committed, %d stale reads committed (lag max %d), %d SIGKILLs",
		len(log.ids), log.lost, len(log.stale), slices.Max(append(log.stale, 0)), len(kills))
	log.mu.Unlock()
	term(t, "soak end", cur, out)
}

func soakArgs(url string) []string {
	return []string{"serve", "--nats-url", url, "--http", "", "--takeover", "--pinned-ttl", "3s",
		"--ack-wait", "2s", "--log-level", "info", "--checkpoint-every", "1000", "--batch", "256"}
}

// prefill creates the dataset and stages n appends as fast as the stream
// takes them, then waits until all are decided: the history stale readers
// read back into.
func prefill(t *testing.T, js jetstream.JetStream, log *soakLog, n int) {
	t.Helper()
	create := newUUID()
	log.add(create)
	schema := []*lancepb.Field{{Id: 0, Name: "id", ParentId: -1, LogicalType: "int64", Type: lancepb.Field_LEAF}}
	frags := []*lancepb.DataFragment{fragment("data/base.lance")} // fragment 0: what stale readers protect
	for i := range soakWriters {
		frags = append(frags, fragment(fmt.Sprintf("data/w%d.lance", i))) // fragment 1+i: writer i's
	}
	stageTxn(t, js, soakDS, &lancepb.Transaction{Uuid: create, Operation: &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{
		Schema: schema, Fragments: frags,
	}}})
	// The i-th append reads version i+1, the head it is decided at (they
	// are decided in stream order): history built fast, at no read lag.
	for done := 0; done < n; {
		k := min(2000, n-done)
		var futs []jetstream.PubAckFuture
		for j := range k {
			id := newUUID()
			log.add(id)
			body, err := proto.Marshal(&lancepb.Transaction{Uuid: id, ReadVersion: uint64(done + j + 1), Operation: &lancepb.Transaction_DataReplacement_{
				DataReplacement: &lancepb.Transaction_DataReplacement{Replacements: []*lancepb.Transaction_DataReplacementGroup{
					{FragmentId: uint64(1 + (done+j)%soakWriters), NewFile: columnFile("data/" + id + ".lance")},
				}},
			}})
			if err != nil {
				t.Fatal(err)
			}
			f, err := js.PublishAsync("cg.txn."+soakDS, body, jetstream.WithMsgID(id))
			if err != nil {
				t.Fatal(err)
			}
			futs = append(futs, f)
		}
		for _, f := range futs {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				t.Fatalf("prefill: %v", err)
			case <-time.After(60 * time.Second):
				t.Fatal("prefill: no ack")
			}
		}
		done += k
	}
	var sc subject.Scheme
	deadline := time.Now().Add(10 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		dec, err := js.Stream(ctx, sc.DecStream())
		var last uint64
		if err == nil {
			var m *jetstream.RawStreamMsg
			m, err = dec.GetLastMsgForSubject(ctx, sc.Dec(soakDS, subject.Committed))
			if err == nil {
				fmt.Sscan(m.Header.Get(subject.HdrVersion), &last)
			}
		}
		cancel()
		if last >= uint64(n+1) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("prefill: head %d of %d after 10 min (%v)", last, n+1, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// soakWorker commits until ctx ends. A writer replaces the column of its
// own fragment at the latest version (many small commits that do not grow
// the manifest) and now and then drops the outcome on purpose (a tiny
// deadline) and commits the same Txn again, as the SDK documents; a stale
// reader reads a version up to -soak.lag behind, appends a fragment and
// protects the cells of fragment 0, which no one changes: the
// precondition is evaluated over the whole lag and the transaction
// commits.
func soakWorker(ctx context.Context, t *testing.T, url string, id int, stale bool, log *soakLog) {
	nc, _ := natstest.Connect(t, url)
	pc, err := producer.New(nc, producer.Config{Timeout: 20 * time.Second})
	if err != nil {
		t.Error(err)
		return
	}
	defer pc.Close()
	rng := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
	for n := 0; ctx.Err() == nil; n++ {
		snap, err := pc.Latest(ctx, soakDS)
		if err != nil {
			continue // a restart in progress
		}
		if stale {
			lag := 1 + rng.Uint64N(min(uint64(*soakLag), snap.Version()-1))
			if snap, err = pc.At(ctx, soakDS, snap.Version()-lag); err != nil {
				continue
			}
		}
		path := fmt.Sprintf("data/w%d-%d.lance", id, n)
		txn := snap.NewTxn().ReplaceColumns(uint64(1+id), columnFile(path))
		if stale {
			// Appends never conflict, whatever the lag; the precondition
			// is evaluated over all of it.
			txn = snap.NewTxn().Append(fragment(path)).CellsUnchanged([]int32{0}, evaluator.WholeFragments(0))
		}
		log.add(txn.ID())
		lose := !stale && rng.IntN(20) == 0
		v, err := commitUntilKnown(ctx, pc, txn, lose, log)
		if err == nil && stale {
			log.mu.Lock()
			log.stale = append(log.stale, v-1-txn.ReadVersion())
			log.mu.Unlock()
		}
	}
}

// columnFile is a data file holding field 0, for a DataReplacement.
func columnFile(path string) *lancepb.DataFile {
	return &lancepb.DataFile{Path: path, Fields: []int32{0}, ColumnIndices: []int32{0}, FileMajorVersion: 2, FileMinorVersion: 1}
}

// commitUntilKnown commits txn, committing the same Txn again while the
// outcome is unknown. With lose the first attempt gets a deadline too
// short to see the decision.
func commitUntilKnown(ctx context.Context, pc *producer.Client, txn *producer.Txn, lose bool, log *soakLog) (uint64, error) {
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if lose && attempt == 0 {
			cancel()
			cctx, cancel = context.WithTimeout(context.Background(), time.Millisecond)
		}
		v, err := pc.Commit(cctx, txn)
		cancel()
		if !errors.Is(err, producer.ErrOutcomeUnknown) && !errors.Is(err, context.DeadlineExceeded) {
			return v, err
		}
		log.mu.Lock()
		log.lost++
		log.mu.Unlock()
		if attempt > 50 {
			return 0, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitAllDecided waits until every uuid of the log has a decision (the
// last restarted committer drains what the kills left staged) and
// returns the dataset's decisions.
func waitAllDecided(t *testing.T, pc *producer.Client, log *soakLog) []*cellguardpb.Decision {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		all := decisions(t, pc.Conn(), soakDS)
		if len(all) >= len(log.ids) || time.Now().After(deadline) {
			return all
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// soakOracle checks the log independently of the committer: exactly one
// decision per staged uuid and none for anything else, committed
// versions contiguous from 1, every committed transaction applies to the
// replayed head, and that head equals the one reloaded from checkpoint
// and log.
func soakOracle(t *testing.T, log *soakLog, all []*cellguardpb.Decision) {
	t.Helper()
	violations := 0
	bad := func(format string, args ...any) {
		violations++
		if violations <= 20 {
			t.Errorf(format, args...)
		}
	}
	seen := map[string]int{}
	rejected := map[cellguardpb.Reason]int{}
	var head *table.Manifest
	for i, rec := range all {
		seen[rec.TxnUuid]++
		if !log.ids[rec.TxnUuid] {
			bad("decision %d for a uuid nobody staged: %s", i, rec.TxnUuid)
		}
		if rec.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED {
			// Stale reads past MaxRebaseLag are rejected READ_VERSION_TOO_OLD
			// (after their preconditions were evaluated); any other
			// rejection means the committer misjudged a valid transaction.
			rejected[rec.Reason]++
			if rec.Reason != cellguardpb.Reason_READ_VERSION_TOO_OLD {
				bad("decision %d: %s rejected %v: %s", i, rec.TxnUuid, rec.Reason, rec.Message)
			}
			continue
		}
		want := uint64(1)
		if head != nil {
			want = head.Version() + 1
		}
		if rec.Version != want {
			bad("decision %d: version %d, want %d", i, rec.Version, want)
			continue
		}
		txn := &lancepb.Transaction{}
		if err := proto.Unmarshal(rec.Transaction, txn); err != nil {
			bad("decision %d: %v", i, err)
			continue
		}
		next, err := table.Apply(context.Background(), head, txn, nil)
		if err != nil {
			bad("replay of version %d: %v", rec.Version, err)
			continue
		}
		head = next
	}
	for id := range log.ids {
		if seen[id] != 1 {
			bad("txn %s has %d decisions, want 1", id, seen[id])
		}
	}
	t.Logf("oracle: %d decisions (rejected by reason: %v), %d violations", len(all), rejected, violations)
}

// reportGaps logs the longest pause between consecutive decisions while
// the workers ran, overall and outside the windows from each SIGKILL to
// the first decision after it, and the same counted only while work was
// staged: a pause before decision i counts from the later of decision i-1
// and the earliest moment a transaction decided at or after i was about to
// be staged (the time a worker took it in hand, so the count errs long).
// -soak.maxgap applies to the pauses while work was staged, restarts
// included.
func reportGaps(t *testing.T, js jetstream.JetStream, begin, end time.Time, kills []time.Time, log *soakLog) {
	t.Helper()
	var sc subject.Scheme
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, sc.DecStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{sc.DecOf(soakDS)}, HeadersOnly: true,
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &begin,
	})
	if err != nil {
		t.Fatal(err)
	}
	type decided struct {
		at     time.Time
		staged time.Time // zero: not staged by a worker of this run
	}
	var ds []decided
	log.mu.Lock()
	defer log.mu.Unlock()
	for {
		b, err := cons.FetchNoWait(1000)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range b.Messages() {
			md, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			if md.Timestamp.Before(end) {
				ds = append(ds, decided{at: md.Timestamp, staged: log.staged[m.Headers().Get(subject.HdrTxnID)]})
			}
			n++
		}
		if n == 0 {
			break
		}
	}
	// waiting[i]: the earliest staging among decisions i and later.
	waiting := make([]time.Time, len(ds)+1)
	for i := len(ds) - 1; i >= 0; i-- {
		waiting[i] = waiting[i+1]
		if st := ds[i].staged; !st.IsZero() && (waiting[i].IsZero() || st.Before(waiting[i])) {
			waiting[i] = st
		}
	}
	var overall, steady, restart, busy, busyRestart time.Duration
	k := 0
	for i := 1; i < len(ds); i++ {
		prev, at := ds[i-1].at, ds[i].at
		gap := at.Sub(prev)
		from := prev
		if w := waiting[i]; w.After(from) {
			from = w
		}
		work := max(at.Sub(from), 0)
		overall = max(overall, gap)
		for k < len(kills) && kills[k].Before(prev) {
			k++
		}
		if k < len(kills) && kills[k].Before(at) { // a kill fell in this gap
			restart = max(restart, gap)
			busyRestart = max(busyRestart, work)
		} else {
			steady = max(steady, gap)
			busy = max(busy, work)
		}
	}
	t.Logf("decision gaps (%d decisions in %v): longest %v; across a SIGKILL+restart %v; outside restarts %v",
		len(ds), end.Sub(begin).Round(time.Second), overall.Round(time.Millisecond), restart.Round(time.Millisecond), steady.Round(time.Millisecond))
	t.Logf("decision gaps while work was staged: longest %v outside restarts, %v across a SIGKILL+restart",
		busy.Round(time.Millisecond), busyRestart.Round(time.Millisecond))
	if *soakMaxGap > 0 && max(busy, busyRestart) > *soakMaxGap {
		t.Errorf("decisions stopped for %v while work was staged (%v across a restart), more than %v", busy, busyRestart, *soakMaxGap)
	}
}
