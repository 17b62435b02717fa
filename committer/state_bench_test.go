package committer

import (
	"fmt"
	"testing"

	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

// BenchmarkDecide measures the decision core alone (no NATS): an append
// staged `lag` versions behind the head.
func BenchmarkDecide(b *testing.B) {
	for _, c := range []struct{ lag, pre int }{{0, 0}, {10, 0}, {100, 0}, {100, 1}, {100, 16}} {
		lag, pre := c.lag, c.pre
		b.Run(fmt.Sprintf("lag=%d/pre=%d", lag, pre), func(b *testing.B) {
			st := newState("bench", limits{maxTxnBytes: 1 << 20, window: 256, maxLag: 100000}, nil)
			seq := uint64(0)
			decide := func(txn *lancepb.Transaction) verdict {
				seq++
				v := st.decide(b.Context(), staged{seq: seq, data: mustMarshal(b, txn)})
				m := st.mark()
				st.commit(m, []*cellguardpb.Decision{v.rec}, []uint64{seq})
				return v
			}
			if v := decide(createTxn(newUUID())); v.next == nil {
				b.Fatal(v.rec)
			}
			for i := 0; i < 300; i++ {
				if i < 20 { // fragments 0..19 exist before the preconditions name them
					decide(appendTxn(newUUID(), st.headVersion()))
					continue
				}
				decide(appendTxn(newUUID(), st.headVersion()))
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				txn := appendTxn(newUUID(), st.headVersion()-uint64(lag))
				if pre > 0 {
					var rows []*lancepb.FragmentRows
					for f := 0; f < pre; f++ {
						rows = append(rows, wholeFragment(uint64(f)))
					}
					txn.Preconditions = []*lancepb.Precondition{cellsUnchanged([]int32{1}, rows...)}
				}
				v := decide(txn)
				if v.next == nil {
					b.Fatal(v.rec)
				}
			}
		})
	}
}
