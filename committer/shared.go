package committer

// Shared appends: the groups of many datasets in one atomic batch.
//
// On a replicated log every append is one replication round, whatever
// its size, and a dataset has one append in flight at a time. With many
// datasets each deciding a transaction or two, the log would take one
// round per dataset: the committer's rate is then the number of rounds
// the log can take. So on replicated (and memory) logs the datasets'
// appends are gathered: an append that finds others waiting goes out with
// them, as one atomic batch (declog.Log.AppendShared) in which each
// dataset's group carries its own fence, checked by the server as if the
// group were alone. The batch lands whole or not at all; when a fence or
// a duplicate refuses it, nothing landed and each group is appended alone,
// which tells whose fence failed (that dataset reloads, as after any
// fence) and lands the others.
//
// There is no sender goroutine to start or stop: the append that finds
// a free lane leads. It takes what is waiting (its own group first, then
// others in arrival order, up to sharedMaxMsgs records), sends it,
// answers every group it carried, and goes on while groups wait — handing
// the lane to a new goroutine once its own group is answered, so that its
// dataset does not wait on others'. A group waits only while every lane
// is sending, and a lane that ends checks under the lock that nothing
// waits for it.

import (
	"context"
	"errors"
	"sync"

	"cellguard/internal/declog"
)

// sharedLanes is how many shared batches may be in flight at once: a
// replicated log pipelines them, and one slow round does not hold every
// dataset.
const sharedLanes = 4

// sharedMaxMsgs bounds the records of one shared batch, below the
// server's default atomic batch limit (1,000). A single group larger than
// this still goes, alone.
const sharedMaxMsgs = 512

// sharedLog gathers datasets' appends into shared batches.
type sharedLog struct {
	dl      *declog.Log
	mu      sync.Mutex
	waiting []*sharedAppend
	lanes   int // leaders sending
}

// sharedAppend is one dataset's group, waiting or being sent.
type sharedAppend struct {
	g    declog.Group
	done chan appended // buffered: the leader never blocks on it
}

func newSharedLog(dl *declog.Log) *sharedLog { return &sharedLog{dl: dl} }

// append appends ds's recs fenced on expect, alone or with other
// datasets' groups, and returns their sequences. Errors wrap ErrFenced
// (ds's fence failed or its decision is in the log already: reload) or
// errAppend (outcome unknown: reload), or are a test hook's crash.
func (s *sharedLog) append(ds string, expect uint64, recs []declog.Encoded) ([]uint64, error) {
	a := &sharedAppend{g: declog.Group{Dataset: ds, Expect: expect, Encs: recs}, done: make(chan appended, 1)}
	s.mu.Lock()
	s.waiting = append(s.waiting, a)
	lead := s.lanes < sharedLanes
	if lead {
		s.lanes++
	}
	s.mu.Unlock()
	if lead {
		s.lead(a)
	}
	res := <-a.done
	return res.seqs, res.err
}

// lead sends what waits until own (nil: nothing) is answered, then hands
// the lane on if groups still wait, or gives it back.
func (s *sharedLog) lead(own *sharedAppend) {
	for {
		s.mu.Lock()
		batch := s.take()
		if len(batch) == 0 {
			s.lanes--
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		s.send(batch)
		if own != nil && len(own.done) > 0 {
			go s.lead(nil)
			return
		}
	}
}

// take removes from the waiting groups those of the next batch: the
// oldest, and after it as many as fit in sharedMaxMsgs records. Called
// with s.mu held.
func (s *sharedLog) take() []*sharedAppend {
	if len(s.waiting) == 0 {
		return nil
	}
	n, msgs := 1, len(s.waiting[0].g.Encs)
	for ; n < len(s.waiting) && msgs+len(s.waiting[n].g.Encs) <= sharedMaxMsgs; n++ {
		msgs += len(s.waiting[n].g.Encs)
	}
	batch := append([]*sharedAppend(nil), s.waiting[:n]...)
	s.waiting = append(s.waiting[:0], s.waiting[n:]...)
	return batch
}

// send appends batch and answers each of its groups. A batch that a fence
// or a duplicate refused landed nothing: its groups are appended one by
// one, each with its own outcome.
func (s *sharedLog) send(batch []*sharedAppend) {
	groups := make([]declog.Group, len(batch))
	for i, a := range batch {
		groups[i] = a.g
	}
	ctx, cancel := context.WithTimeout(context.Background(), appendTimeout)
	seqs, err := s.dl.AppendShared(ctx, groups)
	cancel()
	switch {
	case err == nil:
		for i, a := range batch {
			a.done <- appended{seqs: seqs[i]}
		}
	case errors.Is(err, ErrFenced) && len(batch) > 1:
		for _, a := range batch {
			ctx, cancel := context.WithTimeout(context.Background(), appendTimeout)
			seqs, err := s.dl.AppendEncoded(ctx, a.g.Dataset, a.g.Expect, a.g.Encs)
			cancel()
			a.done <- appended{seqs, err}
		}
	default:
		for _, a := range batch {
			a.done <- appended{err: err}
		}
	}
}
