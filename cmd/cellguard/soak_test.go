package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"cellguard/evaluator"
	"cellguard/internal/declog"
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
	soakLogLevel = flag.String("soak.log-level", "info", "log level of the serve processes; the log of the one that began before the longest pause is printed")
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
	// published is when each uuid was first seen published on its staging
	// subject: staged → published is the SDK's share of a wait,
	// published → decided the committer's.
	published map[string]time.Time
	readers   map[string]bool // uuids staged by the stale readers
	pins      []soakEvent     // the pin advisories of the committer's consumer
	lost      int             // outcomes lost and re-committed
	stale     []uint64        // lags of the stale reads committed
}

func (l *soakLog) add(id string) {
	l.mu.Lock()
	l.ids[id] = true
	if _, ok := l.staged[id]; !ok {
		l.staged[id] = time.Now()
	}
	l.mu.Unlock()
}

// TestSoak is the long liveness and safety run: 8 SDK workers
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

	log := &soakLog{ids: map[string]bool{}, staged: map[string]time.Time{}, published: map[string]time.Time{}, readers: map[string]bool{}}
	prefill(t, js, log, *soakLag)
	t.Logf("prefill: %d versions decided", *soakLag+1)
	watchPublished(t, srv.URL(), log)

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
	var restarts []soakRestart
	tick := time.NewTicker(*soakKillEach)
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
			kill := time.Now()
			_ = cur.Process.Signal(syscall.SIGKILL)
			_ = cur.Wait()
			cur, out = process(t, args...)
			restarts = append(restarts, soakRestart{kill: kill, started: time.Now(), out: out})
		}
	}
	tick.Stop()
	wg.Wait()
	end := time.Now()
	decided := waitAllDecided(t, pc, log)
	soakOracle(t, log, decided)
	reportGaps(t, js, begin, end, restarts, log)
	n, took := timeHeaderScan(t, js)
	t.Logf("a headers-only scan of the dataset's whole log (%d records), the pass every committer start makes before its first decision: %v",
		n, took.Round(time.Millisecond))
	log.mu.Lock()
	t.Logf("%d uuids staged, %d lost outcomes re-committed, %d stale reads committed (lag max %d), %d SIGKILLs",
		len(log.ids), log.lost, len(log.stale), slices.Max(append(log.stale, 0)), len(restarts))
	log.mu.Unlock()
	term(t, "soak end", cur, out)
}

func soakArgs(url string) []string {
	return []string{"serve", "--nats-url", url, "--http", "", "--takeover", "--pinned-ttl", "3s",
		"--ack-wait", "2s", "--log-level", *soakLogLevel, "--checkpoint-every", "1000", "--batch", "256"}
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
		if stale {
			log.mu.Lock()
			log.readers[txn.ID()] = true
			log.mu.Unlock()
		}
		lose := !stale && rng.IntN(20) == 0
		v, err := commitUntilKnown(ctx, pc, txn, lose, log)
		if err == nil && stale {
			log.mu.Lock()
			log.stale = append(log.stale, v-1-txn.ReadVersion())
			log.mu.Unlock()
		}
	}
}

// watchPublished records when each transaction is first published on the
// soak dataset's staging subject, through a plain subscription of its own.
func watchPublished(t *testing.T, url string, log *soakLog) {
	t.Helper()
	nc, _ := natstest.Connect(t, url)
	var sc subject.Scheme
	_, err := nc.Subscribe(sc.Txn(soakDS), func(m *nats.Msg) {
		now := time.Now()
		id := m.Header.Get(subject.HdrMsgID)
		log.mu.Lock()
		defer log.mu.Unlock()
		if _, ok := log.published[id]; !ok {
			log.published[id] = now
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.*."+sc.TxnStream()+".*", func(m *nats.Msg) {
		var adv struct {
			Type   string    `json:"type"`
			Time   time.Time `json:"timestamp"` // the server's, like the decisions'
			Pin    string    `json:"pinned_id"`
			Reason string    `json:"reason"`
		}
		if json.Unmarshal(m.Data, &adv) != nil || !strings.Contains(adv.Type, "pinned") {
			return
		}
		what := strings.TrimPrefix(adv.Type, "io.nats.jetstream.advisory.v1.consumer_group_")
		log.mu.Lock()
		defer log.mu.Unlock()
		log.pins = append(log.pins, soakEvent{at: adv.Time, what: strings.TrimSpace(what + " " + adv.Pin + " " + adv.Reason)})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// soakEvent is something that happened at a time, for the report.
type soakEvent struct {
	at   time.Time
	what string
}

// soakRestart is one SIGKILL of the serve process and its replacement.
type soakRestart struct {
	kill    time.Time   // when the SIGKILL was sent
	started time.Time   // when the replacement was started (the killed process had exited)
	out     *syncBuffer // the replacement's output
}

// deciding is the earliest time the replacement can have decided: when it
// logged "serving", or after, when the consumer was first pinned again
// after the kill.
func (r soakRestart) deciding(pins []soakEvent) time.Time {
	at := r.serving()
	for _, e := range pins {
		if e.at.After(r.kill) && strings.HasPrefix(e.what, "pinned ") {
			if e.at.After(at) {
				at = e.at
			}
			break
		}
	}
	return at
}

// serving is when the replacement logged "serving" (just before its
// committer starts), or when it was started if it did not.
func (r soakRestart) serving() time.Time {
	for line := range strings.Lines(r.out.String()) {
		ts, rest, ok := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if !ok || !strings.Contains(rest, "msg=serving ") {
			continue
		}
		if at, err := time.Parse(time.RFC3339Nano, ts); err == nil && at.After(r.started) {
			return at
		}
	}
	return r.started
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
// the workers ran, overall and outside the restart windows, and the same
// counted only while work was staged: a pause before decision i counts
// from the later of decision i-1 and the earliest moment a transaction
// decided at or after i was about to be staged (the time a worker took it
// in hand, so the count errs long). A restart window runs from a SIGKILL
// to the replacement's first decision: the first after it logged
// "serving" and, when the pin advisories were seen, after the consumer was
// first pinned again (it cannot decide before either). A batch the killed
// process sent just before the kill can land after the kill, even after
// the replacement started, so a window that ended at the first decision
// after the kill would count most of the restart as a pause outside
// restarts.
// -soak.maxgap applies to the pauses while work was staged, restarts
// included.
func reportGaps(t *testing.T, js jetstream.JetStream, begin, end time.Time, restarts []soakRestart, log *soakLog) {
	t.Helper()
	ds := soakDecisions(t, js, begin, end, log)
	log.mu.Lock()
	defer log.mu.Unlock()
	// waiting[i]: the earliest staging among decisions i and later, and
	// the decision that staging belongs to.
	waiting := make([]time.Time, len(ds)+1)
	waiter := make([]int, len(ds)+1)
	for i := len(ds) - 1; i >= 0; i-- {
		waiting[i], waiter[i] = waiting[i+1], waiter[i+1]
		if st := ds[i].staged; !st.IsZero() && (waiting[i].IsZero() || st.Before(waiting[i])) {
			waiting[i], waiter[i] = st, i
		}
	}
	// in[i]: the restart whose window decision i ends a pause in, or -1;
	// first[k]: the first decision of restart k's replacement.
	in := make([]int, len(ds))
	for i := range in {
		in[i] = -1
	}
	first := make([]int, len(restarts))
	for k, r := range restarts {
		from, _ := slices.BinarySearchFunc(ds, r.kill, func(d soakDecided, at time.Time) int { return d.at.Compare(at) })
		first[k], _ = slices.BinarySearchFunc(ds, r.deciding(log.pins), func(d soakDecided, at time.Time) int { return d.at.Compare(at) })
		for i := from; i <= first[k] && i < len(ds); i++ {
			in[i] = k
		}
	}
	var long []soakGap // the pauses while work was staged, outside restarts
	var overall, steady, restart, busy, busyRestart time.Duration
	for i := 1; i < len(ds); i++ {
		prev, at := ds[i-1].at, ds[i].at
		gap := at.Sub(prev)
		from := prev
		if w := waiting[i]; w.After(from) {
			from = w
		}
		work := max(at.Sub(from), 0)
		overall = max(overall, gap)
		if in[i] >= 0 {
			restart = max(restart, gap)
			busyRestart = max(busyRestart, work)
			continue
		}
		steady = max(steady, gap)
		busy = max(busy, work)
		if work > 0 && !waiting[i].IsZero() {
			j := waiter[i]
			long = append(long, soakGap{at: at.Sub(begin), work: work, waitedFor: ds[j].id, reader: log.readers[ds[j].id], later: j - i,
				toPublish: log.published[ds[j].id].Sub(ds[j].staged), toDecide: ds[j].at.Sub(log.published[ds[j].id])})
		}
	}
	slices.SortFunc(long, func(a, b soakGap) int { return cmp.Compare(b.work, a.work) })
	for _, g := range long[:min(len(long), 5)] {
		t.Logf("  pause outside restarts: %v while staged, %v", g.work.Round(time.Millisecond), g)
	}
	t.Logf("decision gaps (%d decisions in %v): longest %v; across a SIGKILL+restart %v; outside restarts %v",
		len(ds), end.Sub(begin).Round(time.Second), overall.Round(time.Millisecond), restart.Round(time.Millisecond), steady.Round(time.Millisecond))
	t.Logf("decision gaps while work was staged: longest %v outside restarts, %v across a SIGKILL+restart",
		busy.Round(time.Millisecond), busyRestart.Round(time.Millisecond))
	reportRestarts(t, begin, ds, restarts, first, log.pins)
	if *soakMaxGap > 0 && max(busy, busyRestart) > *soakMaxGap {
		t.Errorf("decisions stopped for %v while work was staged (%v across a restart), more than %v", busy, busyRestart, *soakMaxGap)
	}
}

// soakDecided is one decision of the soak dataset, with when its
// transaction was about to be staged (zero: not by a worker of this run).
type soakDecided struct {
	at, staged time.Time
	id         string
}

// soakDecisions reads the decisions made between begin and end.
func soakDecisions(t *testing.T, js jetstream.JetStream, begin, end time.Time, log *soakLog) []soakDecided {
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
	log.mu.Lock()
	defer log.mu.Unlock()
	var ds []soakDecided
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
				id := m.Headers().Get(subject.HdrTxnID)
				ds = append(ds, soakDecided{at: md.Timestamp, id: id, staged: log.staged[id]})
			}
			n++
		}
		if n == 0 {
			return ds
		}
	}
}

// reportRestarts logs how long each restart stopped decisions (from the
// SIGKILL to the replacement's first decision) and, for the longest, the
// replacement's log and the pin advisories of the window.
func reportRestarts(t *testing.T, begin time.Time, ds []soakDecided, restarts []soakRestart, first []int, pins []soakEvent) {
	t.Helper()
	worst, outages := -1, make([]string, 0, len(restarts))
	var longest time.Duration
	for k, r := range restarts {
		if first[k] >= len(ds) {
			continue
		}
		d := ds[first[k]].at.Sub(r.kill)
		outages = append(outages, fmt.Sprintf("%v (serving after %v)", d.Round(10*time.Millisecond), r.serving().Sub(r.kill).Round(10*time.Millisecond)))
		if d > longest {
			worst, longest = k, d
		}
	}
	t.Logf("restarts: SIGKILL → first decision of the replacement: %v", outages)
	if worst < 0 {
		return
	}
	r := restarts[worst]
	firstAt := ds[first[worst]].at
	var b strings.Builder
	fmt.Fprintf(&b, "longest restart: SIGKILL at +%v, replacement started %v later, serving %v later, first decision %v after the SIGKILL\n",
		r.kill.Sub(begin).Round(time.Millisecond), r.started.Sub(r.kill).Round(time.Millisecond),
		r.serving().Sub(r.kill).Round(time.Millisecond), longest.Round(time.Millisecond))
	// One line per run of alike advisories (one per partition consumer).
	var run []soakEvent
	flush := func() {
		if len(run) == 0 {
			return
		}
		from, to := run[0].at.Sub(r.kill).Round(time.Millisecond), run[len(run)-1].at.Sub(r.kill).Round(time.Millisecond)
		if len(run) == 1 {
			fmt.Fprintf(&b, "  +%v after the SIGKILL: %s\n", from, run[0].what)
		} else {
			fmt.Fprintf(&b, "  +%v…+%v after the SIGKILL: %d × %s\n", from, to, len(run), run[0].what)
		}
		run = run[:0]
	}
	for _, e := range pins {
		if e.at.Before(r.kill) || e.at.After(firstAt.Add(time.Second)) {
			continue
		}
		if len(run) > 0 && (run[0].what != e.what || strings.HasPrefix(e.what, "pinned ")) {
			flush()
		}
		run = append(run, e)
	}
	flush()
	fmt.Fprintf(&b, "its log (first decision at %s):\n%s", firstAt.UTC().Format("15:04:05.000"), r.out.String())
	t.Log(b.String())
}

// soakGap is one pause between decisions while work was staged: when it
// ended (since the soak began), the transaction
// that waited longest through it, whether a stale reader staged it, how
// many decisions after the pause it came, and how its wait split between
// the SDK (staged → published) and the committer (published → decided).
type soakGap struct {
	at, work            time.Duration
	waitedFor           string
	reader              bool
	later               int
	toPublish, toDecide time.Duration
}

func (g soakGap) String() string {
	who := "writer"
	if g.reader {
		who = "stale reader"
	}
	return fmt.Sprintf("ending at +%v: txn %s of a %s, decided %d later, staged→published %v, published→decided %v",
		g.at.Round(time.Millisecond), g.waitedFor[:min(8, len(g.waitedFor))], who, g.later,
		g.toPublish.Round(time.Millisecond), g.toDecide.Round(time.Millisecond))
}

// timeHeaderScan reads the headers of every record of the soak dataset's
// log, as a committer does when it loads the dataset, and times it.
func timeHeaderScan(t *testing.T, js jetstream.JetStream) (int, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var sc subject.Scheme
	dl, err := declog.Open(ctx, js, sc, declog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	start, n := time.Now(), 0
	for _, err := range dl.Scan(ctx, sc.DecOf(soakDS), 1, declog.ScanOptions{HeadersOnly: true}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n, time.Since(start)
}
