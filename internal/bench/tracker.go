package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// tracker matches decisions to staged transactions. A transaction is
// counted done at its first decision; a second decision of it counts as a
// duplicate. Transactions given to inOrder are also checked against their
// dataset's order.
type tracker struct {
	mu        sync.Mutex
	sentAt    map[string]time.Time
	many      map[string]manyTxn // dataset and round of an append given to inOrder, until decided
	next      map[int]int        // per dataset, the round whose decision comes next
	dups      int64              // guarded by mu
	unordered int64              // guarded by mu
	waiters   map[string]chan struct{}
	lat       []time.Duration
	sentNs    []int64 // the staging time (Unix ns) of each latency in lat
	first     time.Time
	last      time.Time
	done      atomic.Int64
	rejected  atomic.Int64
	reasons   map[string]int64  // rejections by reason; guarded by mu
	examples  map[string]string // the first rejection's message per reason; guarded by mu
	head      atomic.Uint64
}

func newTracker(n int) *tracker {
	return &tracker{
		sentAt: make(map[string]time.Time, n), many: map[string]manyTxn{}, next: map[int]int{},
		waiters: map[string]chan struct{}{}, reasons: map[string]int64{}, examples: map[string]string{},
	}
}

// await registers ch to be signalled when id is decided.
func (t *tracker) await(id string, ch chan struct{}) {
	t.mu.Lock()
	t.waiters[id] = ch
	t.mu.Unlock()
}

func (t *tracker) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lat, t.sentNs, t.first = t.lat[:0], t.sentNs[:0], time.Time{}
	clear(t.reasons)
	clear(t.examples)
	clear(t.next)
	t.dups, t.unordered = 0, 0
	t.done.Store(0)
	t.rejected.Store(0)
}

func (t *tracker) sent(id string) {
	now := time.Now()
	t.mu.Lock()
	t.sentAt[id] = now
	if t.first.IsZero() {
		t.first = now
	}
	t.mu.Unlock()
}

// inOrder has the decision of id, about to be staged as append x of a
// many-datasets run, checked against its dataset's order.
func (t *tracker) inOrder(id string, x manyTxn) {
	t.mu.Lock()
	t.many[id] = x
	t.mu.Unlock()
}

// ordered checks that the decision of id, if given to inOrder, is its
// dataset's next; called with t.mu held.
func (t *tracker) ordered(id string) {
	x, ok := t.many[id]
	if !ok {
		return
	}
	delete(t.many, id)
	if t.next[x.ds] != x.round {
		t.unordered++
	}
	t.next[x.ds] = x.round + 1
}

func (t *tracker) onDecision(m *nats.Msg) {
	now := time.Now()
	id := m.Header.Get(subject.HdrTxnID)
	if v, err := strconv.ParseUint(m.Header.Get(subject.HdrVersion), 10, 64); err == nil && v > t.head.Load() {
		t.head.Store(v)
	}
	rejected := strings.HasSuffix(m.Subject, ".rejected")
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.sentAt[id]
	if !ok {
		t.dups++
		return
	}
	t.last = now
	t.lat = append(t.lat, now.Sub(at))
	t.sentNs = append(t.sentNs, at.UnixNano())
	delete(t.sentAt, id)
	t.ordered(id)
	if rejected {
		t.rejected.Add(1)
		reason := m.Header.Get(subject.HdrReason)
		if t.reasons[reason]++; t.reasons[reason] == 1 {
			t.examples[reason] = rejectionMessage(m.Data)
		}
	}
	if ch, ok := t.waiters[id]; ok {
		delete(t.waiters, id)
		ch <- struct{}{}
	}
	t.done.Add(1)
}

func (t *tracker) wait(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for t.done.Load() < int64(n) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("bench: %d of %d decisions after %v", t.done.Load(), n, timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return nil
}

func (t *tracker) result(n int) result {
	t.mu.Lock()
	defer t.mu.Unlock()
	lat := slices.Clone(t.lat)
	slices.Sort(lat)
	r := result{rate: float64(n) / t.last.Sub(t.first).Seconds(), rejected: t.rejected.Load(), duplicates: t.dups, outOfOrder: t.unordered}
	if len(t.reasons) > 0 {
		r.reasons, r.examples = maps.Clone(t.reasons), maps.Clone(t.examples)
	}
	if len(lat) > 0 {
		r.p50 = lat[len(lat)/2]
		r.p99 = lat[len(lat)*99/100]
	}
	return r
}

// rejectionMessage is the committer's explanation in a rejected decision
// record, or why there is none.
func rejectionMessage(data []byte) string {
	var d cellguardpb.Decision
	if err := proto.Unmarshal(data, &d); err != nil {
		return fmt.Sprintf("(undecodable decision: %v)", err)
	}
	return d.GetMessage()
}
