package committer

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestDequeueLetsGoOfBodies takes a dataset's queued messages, all and
// some: the queue keeps no reference to a taken message's body, in its
// length or beyond it, so a dataset waiting for its next message does not
// hold its last ones alive.
func TestDequeueLetsGoOfBodies(t *testing.T) {
	w := &worker{c: &Committer{}}
	queue := func(seqs ...uint64) {
		for _, s := range seqs {
			w.queue = append(w.queue, item{staged: staged{Seq: s, Data: make([]byte, 1<<10)}, ds: "ds"})
		}
	}
	held := func() (n int) {
		for _, it := range w.queue[:cap(w.queue)] {
			if it.Data != nil {
				n++
			}
		}
		return n
	}
	queue(3, 1, 2)
	if got := w.takeQueued(2); len(got) != 2 || got[0].Seq != 1 || got[1].Seq != 3 {
		t.Fatalf("takeQueued(2) = %v; want seqs 1, 3", got)
	}
	if len(w.queue) != 1 || w.queue[0].Seq != 2 || held() != 1 {
		t.Fatalf("after taking 2 of 3: queue %d long holding %d bodies; want 1 (seq 2) holding 1", len(w.queue), held())
	}
	if got := w.takeQueued(5); len(got) != 1 || got[0].Seq != 2 {
		t.Fatalf("takeQueued(5) = %v; want seq 2", got)
	}
	if held() != 0 {
		t.Fatalf("an emptied queue holds %d bodies; want 0", held())
	}
	w.epoch = 1
	queue(5, 4)
	for i := range w.queue {
		w.queue[i].epoch = 1
	}
	if got := w.takeReady(1); len(got) != 1 || got[0].Seq != 5 {
		t.Fatalf("takeReady(1) = %v; want seq 5", got)
	}
	if len(w.queue) != 1 || held() != 1 {
		t.Fatalf("after takeReady(1): queue %d long holding %d bodies; want 1 holding 1", len(w.queue), held())
	}
}

// TestEnqueueRedeliveryReplaces queues a message, then its redelivery:
// the queue holds one copy, the newer delivery's.
func TestEnqueueRedeliveryReplaces(t *testing.T) {
	w := &worker{c: &Committer{}, queued: true} // queued: no decider to wake
	first := &deliveredMsg{}
	again := &deliveredMsg{}
	w.enqueue([]item{{staged: staged{Seq: 7, Data: []byte("first")}, msg: first}, {staged: staged{Seq: 8}, msg: first}})
	w.enqueue([]item{{staged: staged{Seq: 7, Data: []byte("again")}, msg: again, redelivered: true}})
	if len(w.queue) != 2 || w.queue[0].Seq != 7 || string(w.queue[0].Data) != "again" || w.queue[0].msg != again || w.queue[1].Seq != 8 {
		t.Fatalf("queue after a redelivery: %+v; want seq 7 (the redelivery) then 8", w.queue)
	}
}

// deliveredMsg stands for one delivery of a staged message: the test
// compares deliveries, it never acks.
type deliveredMsg struct{ jetstream.Msg }
