package decide

import (
	"fmt"
	"syscall"
	"testing"

	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

// BenchmarkDecide measures the decision core alone (no NATS): an append
// staged `lag` versions behind the head, decided, committed into the
// state, and its record encoded as the log append sends it. The staged
// bodies are built before the timer starts: what is measured is the
// committer's work, not the test's.
func BenchmarkDecide(b *testing.B) {
	for _, c := range []struct{ lag, pre int }{{0, 0}, {10, 0}, {100, 0}, {100, 1}, {100, 16}} {
		lag, pre := c.lag, c.pre
		b.Run(fmt.Sprintf("lag=%d/pre=%d", lag, pre), func(b *testing.B) {
			st := NewState("bench", Limits{MaxTxnBytes: 1 << 20, Window: 256, MaxLag: 100000}, nil)
			seq := uint64(0)
			decide := func(body []byte) Verdict {
				seq++
				m := st.Mark()
				v := st.Decide(b.Context(), Staged{Seq: seq, Data: body})
				st.Commit(m, []*cellguardpb.Decision{v.Rec}, []uint64{seq})
				return v
			}
			if v := decide(mustMarshal(b, createTxn(newUUID()))); v.Next == nil {
				b.Fatal(v.Rec)
			}
			for range 300 {
				decide(mustMarshal(b, appendTxn(newUUID(), st.HeadVersion())))
			}
			bodies := make([][]byte, b.N)
			for i := range bodies {
				txn := appendTxn(newUUID(), st.HeadVersion()+uint64(i)-uint64(lag))
				if pre > 0 { // fragments 0..pre-1 exist: the first appends made them
					var rows []*lancepb.FragmentRows
					for f := 0; f < pre; f++ {
						rows = append(rows, wholeFragment(uint64(f)))
					}
					txn.Preconditions = []*lancepb.Precondition{cellsUnchanged([]int32{1}, rows...)}
				}
				bodies[i] = mustMarshal(b, txn)
			}
			b.ResetTimer()
			cpu0 := processCPU(b)
			for i := 0; i < b.N; i++ {
				v := decide(bodies[i])
				if v.Next == nil {
					b.Fatal(v.Rec)
				}
				if _, err := encodeRecord(v); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkStalePreconditionFailed measures the decision-core time of a
// PRECONDITION_FAILED decision (evaluation and culprit search included)
// for a transaction read `lag` versions behind head, with a change index
// large enough to cover the lag. The target is ≤ 1 ms at lag 100,000.
func BenchmarkStalePreconditionFailed(b *testing.B) {
	for _, lag := range []int{100, 10000, 100000} {
		b.Run(fmt.Sprintf("lag=%d", lag), func(b *testing.B) {
			lim := staleLimits()
			lim.IndexBytes = 64 << 20
			st := NewState("bench", lim, nil)
			seq := uint64(0)
			decide := func(txn *lancepb.Transaction) Verdict {
				seq++
				m := st.Mark()
				v := st.Decide(b.Context(), Staged{Seq: seq, Data: mustMarshal(b, txn)})
				st.Commit(m, []*cellguardpb.Decision{v.Rec}, []uint64{seq})
				return v
			}
			decide(createTxn(newUUID()))
			decide(appendTxn(newUUID(), 1))
			decide(deleteFragmentTxn(newUUID(), 2, 1))
			for range lag - 1 { // head - read version 2 = lag
				if v := decide(appendTxn(newUUID(), st.HeadVersion())); v.Next == nil {
					b.Fatal(v.Rec)
				}
			}
			bodies := make([][]byte, b.N)
			for i := range bodies {
				bodies[i] = mustMarshal(b, staleTxn())
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				seq++
				v := st.Decide(b.Context(), Staged{Seq: seq, Data: bodies[i]})
				if v.Rec.Reason != cellguardpb.Reason_PRECONDITION_FAILED || v.Rec.Violations[0].CulpritVersion != 3 {
					b.Fatal(v.Rec)
				}
			}
		})
	}
}

// encodeRecord returns the bytes the log append sends for v's record:
// those decide encoded (see declog.Log.AppendEncoded).
func encodeRecord(v Verdict) ([]byte, error) {
	if v.body == nil {
		return nil, fmt.Errorf("record of %s was not encoded", v.Rec.GetTxnUuid())
	}
	return v.body, nil
}

// processCPU returns the CPU time the process has used, in nanoseconds
// (user and system, every thread: garbage collection included). On a
// machine shared with other work, cpu-ns/op is steadier than ns/op.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkDecideQuiet measures an append onto a quiet dataset of 256
// to 320 fragments (runs of 64 appends from 256), the state made quiet
// again after it, as the committer's sweep does a second later:
// decided, committed, its record encoded, then Quiet. read: the packed
// head is read before the append (as a precondition's lookup would), so
// that the append builds on all its fragments and Quiet packs them all;
// otherwise the append adds to the packed head and Quiet packs what it
// added.
func BenchmarkDecideQuiet(b *testing.B) {
	for _, read := range []bool{false, true} {
		b.Run(fmt.Sprintf("read=%t", read), func(b *testing.B) {
			var st *State
			seq := uint64(0)
			decide := func(body []byte) Verdict {
				seq++
				m := st.Mark()
				v := st.Decide(b.Context(), Staged{Seq: seq, Data: body})
				st.Commit(m, []*cellguardpb.Decision{v.Rec}, []uint64{seq})
				return v
			}
			var bodies [][]byte
			start := func() {
				st, seq = NewState("bench", Limits{MaxTxnBytes: 1 << 20, Window: 256, MaxLag: 100000}, nil), 0
				if v := decide(mustMarshal(b, createTxn(newUUID()))); v.Next == nil {
					b.Fatal(v.Rec)
				}
				for st.Head.NumFragments() < 256 {
					decide(mustMarshal(b, appendTxn(newUUID(), st.HeadVersion())))
				}
				st.Quiet()
				bodies = bodies[:0]
				for i := range 64 {
					bodies = append(bodies, mustMarshal(b, appendTxn(newUUID(), st.HeadVersion()+uint64(i))))
				}
			}
			var cpu int64
			i := 0
			for b.Loop() {
				if i%64 == 0 {
					b.StopTimer()
					start()
					b.StartTimer()
				}
				cpu0 := processCPU(b)
				if read {
					st.Head.Fragment(0)
				}
				v := decide(bodies[i%64])
				if v.Next == nil {
					b.Fatal(v.Rec)
				}
				if _, err := encodeRecord(v); err != nil {
					b.Fatal(err)
				}
				st.Quiet()
				cpu += processCPU(b) - cpu0
				i++
			}
			b.ReportMetric(float64(cpu)/float64(i), "cpu-ns/op")
		})
	}
}

// BenchmarkDecideCreate measures the decision core's creation of a
// dataset of `frags` fragments (no NATS): decided on a state of its own,
// committed, its record encoded as the log append sends it, and its head
// packed as a quiet dataset's is.
func BenchmarkDecideCreate(b *testing.B) {
	for _, frags := range []int{1, 256} {
		b.Run(fmt.Sprintf("fragments=%d", frags), func(b *testing.B) {
			bodies := make([][]byte, 64)
			for i := range bodies {
				txn := createTxn(newUUID())
				ow := txn.GetOverwrite()
				ow.Fragments = ow.Fragments[:0]
				for f := range frags {
					ow.Fragments = append(ow.Fragments, dataFragment(fmt.Sprintf("data/%d-%d.lance", i, f), 1000))
				}
				bodies[i] = mustMarshal(b, txn)
			}
			var cpu int64
			i := 0
			for b.Loop() {
				cpu0 := processCPU(b)
				st := NewState("bench", Limits{MaxTxnBytes: 1 << 20, Window: 256, MaxLag: 100000}, nil)
				m := st.Mark()
				v := st.Decide(b.Context(), Staged{Seq: 1, Data: bodies[i%len(bodies)]})
				if v.Next == nil {
					b.Fatal(v.Rec)
				}
				st.Commit(m, []*cellguardpb.Decision{v.Rec}, []uint64{1})
				if _, err := encodeRecord(v); err != nil {
					b.Fatal(err)
				}
				st.Quiet()
				cpu += processCPU(b) - cpu0
				i++
			}
			b.ReportMetric(float64(cpu)/float64(i), "cpu-ns/op")
		})
	}
}
