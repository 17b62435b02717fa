package nemesis

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// A dataset, as its clients see it, is a register holding its head
// version. The operations and when each is legal, faithful to the SDK's
// contract (docs/design.md §7.2):
//
//   - Read returns the latest version: every version committed before the
//     call is included, so it returns the head at some instant of the call.
//   - Commit of a transaction read at r (a version the client read, so
//     r ≤ head): committed at v means the head was v-1 and became v (one
//     decision per transaction, versions contiguous); rejected leaves the
//     head as it was; unknown may or may not take effect, at any time
//     after the call (it never returns, as Jepsen's indeterminate
//     operations), and if it does the head goes up by one.
//
// Appends never conflict, so this model cannot tell whether a rejection
// was right; the log checker (Check) does that: no transaction a client
// saw rejected is committed.
type modelIn struct {
	kind Kind
	read uint64
}

type modelOut struct {
	result  Result
	version uint64
}

// datasetModel is the porcupine model of one dataset whose head is init
// when the history starts.
func datasetModel(init uint64) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{init} },
		Step: func(state, input, output any) []any {
			head, in, out := state.(uint64), input.(modelIn), output.(modelOut)
			if in.kind == Read {
				if out.version == head {
					return []any{head}
				}
				return nil
			}
			if in.read > head {
				return nil
			}
			switch out.result {
			case Committed:
				if out.version == head+1 {
					return []any{out.version}
				}
				return nil
			case Rejected:
				return []any{head}
			}
			return []any{head, head + 1}
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(modelIn), output.(modelOut)
			if in.kind == Read {
				return fmt.Sprintf("read → %d", out.version)
			}
			if out.result == Committed {
				return fmt.Sprintf("commit@%d → %d", in.read, out.version)
			}
			return fmt.Sprintf("commit@%d → %s", in.read, out.result)
		},
		DescribeState: func(state any) string { return fmt.Sprint(state) },
	}
	return nm.ToModel()
}

// Linearizable checks the history of one dataset's operations (ds's ops
// among ops) against the register model, starting from head init, within
// timeout. It returns porcupine's verdict and, when the history is not
// linearizable, the longest prefix it could linearize, described.
func Linearizable(ops []Op, ds string, init uint64, timeout time.Duration) (porcupine.CheckResult, string) {
	var h []porcupine.Operation
	var t0 time.Time
	for _, o := range ops {
		if o.Dataset == ds && (t0.IsZero() || o.Call.Before(t0)) {
			t0 = o.Call
		}
	}
	for _, o := range ops {
		if o.Dataset != ds {
			continue
		}
		ret := o.Return.Sub(t0).Nanoseconds()
		if o.Kind == Commit && o.Result == Unknown {
			ret = math.MaxInt64
		}
		h = append(h, porcupine.Operation{ClientId: o.Client, Input: modelIn{kind: o.Kind, read: o.Read},
			Call: o.Call.Sub(t0).Nanoseconds(), Output: modelOut{result: o.Result, version: o.Version}, Return: ret})
	}
	model := datasetModel(init)
	res, info := porcupine.CheckOperationsVerbose(model, h, timeout)
	if res != porcupine.Illegal {
		return res, ""
	}
	var longest []int
	for _, part := range info.PartialLinearizations() {
		for _, l := range part {
			if len(l) > len(longest) {
				longest = l
			}
		}
	}
	in := map[int]bool{}
	for _, i := range longest {
		in[i] = true
	}
	at := func(i int) string {
		ret := "never"
		if h[i].Return != math.MaxInt64 {
			ret = fmt.Sprintf("%.3fs", float64(h[i].Return)/1e9)
		}
		return fmt.Sprintf(" client %d %s [%.3fs, %s];", h[i].ClientId, model.DescribeOperation(h[i].Input, h[i].Output), float64(h[i].Call)/1e9, ret)
	}
	desc := fmt.Sprintf("%d of %d operations linearize; the last of them:", len(longest), len(h))
	for _, i := range longest[max(0, len(longest)-4):] {
		desc += at(i)
	}
	desc += " the first left out:"
	var rest []int
	for i := range h {
		if !in[i] {
			rest = append(rest, i)
		}
	}
	slices.SortFunc(rest, func(a, b int) int { return cmp.Compare(h[a].Call, h[b].Call) })
	for _, i := range rest[:min(4, len(rest))] {
		desc += at(i)
	}
	return res, desc
}
