package evaluator

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"

	"cellguard/proto/lancepb"
)

// The oracle compares Evaluate with the truth. For random histories built
// by the simulator (sim_test.go) it draws random preconditions at a random
// read version and a random later head, and asks, for every cell group
// (precondition × field × fragment), whether any protected cell's value or
// existence changed between the two versions:
//
//   - ProtectedRows and Strict: the field's type or nullability changed or
//     the field is gone; or a protected row was live at one version and not
//     at the other (deleted, un-deleted, moved away); or it is live at both
//     (wherever it now is) with a different value;
//   - Ignore: the same, except that deletions are invisible: only rows
//     physically present at both versions are compared, by stored value.
//
// Any group the truth says changed and Evaluate accepts is an
// under-rejection: the test fails on the first one. Groups Evaluate rejects
// while the truth says unchanged are over-rejections; they are counted by
// reason and by the operation Blame names, and logged.
//
// Run long with: go test ./evaluator -run TestOracle -oracle.cases=100000 -v

var (
	oracleCases = flag.Int("oracle.cases", 3000, "oracle cases (precondition sets, each evaluated under all three deletion policies)")
	oracleSeed  = flag.Uint64("oracle.seed", 1, "seed of the first oracle history")
)

const (
	oracleSteps        = 40 // commits per history
	oracleCasesPerHist = 60
)

type group struct {
	pre   int
	field int32
	frag  uint64
}

type oracleStats struct {
	cases, groups, changed int
	rejected               map[DeletionPolicy]int
	over                   map[DeletionPolicy]map[string]int
	overTotal              map[DeletionPolicy]int
	ops                    map[string]int
}

func TestOracle(t *testing.T) {
	st := &oracleStats{
		rejected:  map[DeletionPolicy]int{},
		over:      map[DeletionPolicy]map[string]int{ProtectedRows: {}, Strict: {}, Ignore: {}},
		overTotal: map[DeletionPolicy]int{},
		ops:       map[string]int{},
	}
	histories := 0
	for seed := *oracleSeed; st.cases < *oracleCases; seed++ {
		s := newSim(t, seed)
		for range oracleSteps {
			s.step()
		}
		for range oracleCasesPerHist {
			if st.cases >= *oracleCases {
				break
			}
			s.oracleCase(t, st)
		}
		for k, v := range s.counts {
			st.ops[k] += v
		}
		histories++
		if t.Failed() {
			t.Fatalf("history seed %d:\n%s", seed, s.history())
		}
	}
	t.Logf("oracle: %d cases over %d histories (seeds %d–%d), %d cell groups, %d changed (truth)",
		st.cases, histories, *oracleSeed, *oracleSeed+uint64(histories)-1, st.groups, st.changed)
	t.Logf("operations committed: %v", fmtCounts(st.ops))
	t.Logf("under-rejections: 0")
	for _, p := range []DeletionPolicy{ProtectedRows, Strict, Ignore} {
		t.Logf("%s: %d groups rejected, %d of them over-rejections:", p, st.rejected[p], st.overTotal[p])
		for _, k := range slices.Sorted(maps.Keys(st.over[p])) {
			t.Logf("    %6d  %s", st.over[p][k], k)
		}
	}
}

func fmtCounts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// oracleCase draws one precondition set and checks it under every policy.
func (s *sim) oracleCase(t *testing.T, st *oracleStats) {
	t.Helper()
	last := s.head()
	h := last - s.rng.Uint64N(min(last, 4))
	r := 1 + s.rng.Uint64N(h)
	if s.rng.IntN(3) == 0 {
		r = h - s.rng.Uint64N(min(h, 3)) // recent reads are the common case
	}
	pre, ok := s.randomPreconditions(r)
	if !ok {
		return
	}
	st.cases++
	pinned, head := s.mans[r], s.mans[h]

	// The preconditions survive the wire and validate at the read version.
	txn := &lancepb.Transaction{ReadVersion: r, Uuid: "staged", Preconditions: s.wire(pre),
		Operation: &lancepb.Transaction_DataReplacement_{DataReplacement: &lancepb.Transaction_DataReplacement{}}}
	back, err := Prepare(pinned, txn, Limits{})
	if err != nil {
		t.Fatalf("preconditions %v at v%d do not validate: %v", pre, r, err)
	}
	for i := range pre {
		if !back[i].Rows.Equal(pre[i].Rows) || !slices.Equal(back[i].Fields, pre[i].Fields) {
			t.Fatalf("wire round trip changed precondition %d: %v → %v", i, pre[i], back[i])
		}
	}

	var groups []group
	truth := map[group]bool{}
	for i, p := range pre {
		for _, fr := range p.Rows.frags {
			for _, f := range p.Fields {
				groups = append(groups, group{i, f, fr.id})
			}
		}
	}
	steps := make([]Step, 0, h-r)
	for v := r + 1; v <= h; v++ {
		steps = append(steps, Step{Version: v, TxnUUID: s.uuids[v], Manifest: s.mans[v]})
	}
	ix := s.changeIndex(h)
	for _, pol := range []DeletionPolicy{ProtectedRows, Strict, Ignore} {
		opts := Options{Policy: pol, Deletions: s.dv}
		v, err := Evaluate(t.Context(), pinned, head, pre, opts)
		if err != nil {
			t.Fatalf("Evaluate v%d→v%d: %v", r, h, err)
		}
		if again, _ := Evaluate(t.Context(), pinned, head, pre, opts); again.String() != v.String() {
			t.Fatalf("Evaluate is not deterministic:\n%s\n%s", v, again)
		}
		v = Blame(t.Context(), pinned, steps, pre, v, opts)
		s.checkIndexed(t, ix, r, pre, opts, v)
		rejected := map[group]Violation{}
		for _, x := range v.Violations {
			g := group{x.Precondition, x.FieldID, x.FragmentID}
			if _, dup := rejected[g]; dup {
				t.Fatalf("group %v reported twice", g)
			}
			rejected[g] = x
		}
		if (len(rejected) == 0) != v.Accepted() {
			t.Fatalf("verdict %v with %d violations", v.Outcome, len(rejected))
		}
		for _, g := range groups {
			changed := s.changed(r, h, pre[g.pre], g, pol)
			if pol == ProtectedRows {
				st.groups++
				if changed {
					st.changed++
				}
				truth[g] = changed
			}
			x, rej := rejected[g]
			switch {
			case changed && !rej:
				t.Errorf("UNDER-REJECTION (%s): v%d→v%d, precondition %d field %d fragment %d rows %v changed but Evaluate accepts it\npreconditions: %v\nverdict: %v",
					pol, r, h, g.pre, g.field, g.frag, pre[g.pre].Rows, pre, v)
			case rej && !changed:
				cause := x.Reason.String() + " after " + s.cause(r, h, pre[g.pre], g, opts, x.Reason) +
					": " + s.explain(r, h, pre[g.pre], g, pol)
				st.over[pol][cause]++
				st.overTotal[pol]++
			}
			if rej {
				st.rejected[pol]++
				s.checkBlame(t, r, h, pre[g.pre], g, pol, x, changed)
			}
			delete(rejected, g)
		}
		if len(rejected) > 0 {
			t.Fatalf("violations for cell groups no precondition names: %v", rejected)
		}
	}
}

// cause names the operation behind a violation: the one that made the
// first version at which the group is rejected for the same reason.
func (s *sim) cause(r, h uint64, p Precondition, g group, opts Options, reason Reason) string {
	one := []Precondition{{Fields: []int32{g.field}, Rows: RowSelection{frags: []fragRows{{id: g.frag, rows: mustRows(p, g.frag)}}}}}
	for v := r + 1; v <= h; v++ {
		got, err := Evaluate(s.t.Context(), s.mans[r], s.mans[v], one, opts)
		if err == nil && len(got.Violations) == 1 && got.Violations[0].Reason == reason {
			op := s.log[v-1]
			return op[strings.IndexByte(op, ' ')+1:]
		}
	}
	return "?"
}

func mustRows(p Precondition, frag uint64) *roaring.Bitmap {
	rows, _ := p.Rows.Fragment(frag)
	return rows.bm
}

// checkBlame: the blamed version lies after the read version, at or before
// head, and no later than the first version whose truth differs (Evaluate
// never under-rejects, so it notices a difference no later than the truth).
func (s *sim) checkBlame(t *testing.T, r, h uint64, p Precondition, g group, pol DeletionPolicy, x Violation, changed bool) {
	t.Helper()
	if x.Version <= r || x.Version > h || x.TxnUUID != s.uuids[x.Version] {
		t.Fatalf("group %v blamed on version %d (%q), outside (%d, %d]", g, x.Version, x.TxnUUID, r, h)
	}
	if !changed {
		return
	}
	for v := r + 1; v <= h; v++ {
		if s.changed(r, v, p, g, pol) {
			if x.Version > v {
				t.Fatalf("group %v blamed on version %d, but the cells first changed at %d", g, x.Version, v)
			}
			return
		}
	}
}

// explain says why the truth finds no change in an over-rejected group.
func (s *sim) explain(r, h uint64, p Precondition, g group, pol DeletionPolicy) string {
	P, H := s.states[r], s.states[h]
	pf := P.frags[g.frag]
	rows, _ := p.Rows.Fragment(g.frag)
	allDeleted, gone, moved, deadChanged := true, false, false, false
	for off := range rows.Offsets(uint64(len(pf.rowIDs))) {
		allDeleted = allDeleted && pf.deleted[off]
		hid, hoff, ok := H.locate(pf.rowIDs[off])
		gone = gone || !ok
		moved = moved || ok && (hid != g.frag || hoff != int(off))
		deadChanged = deadChanged || ok && pf.deleted[off] && H.frags[hid].value(g.field, hoff) != pf.value(g.field, int(off))
	}
	switch {
	case pol != Ignore && allDeleted:
		return "protected rows already deleted at the read version"
	case pol != Ignore && deadChanged:
		return "stored values changed only at protected rows deleted at both versions"
	case gone && pol == Ignore:
		return "protected rows no longer stored (removed rows count as deleted, masked under ignore)"
	case gone:
		return "protected rows no longer stored, but were deleted at the read version"
	case moved:
		return "protected rows moved with their values"
	case pol == Strict:
		return "same values and deletions at the protected rows"
	}
	return "same values at the protected rows"
}

// changed is the truth: did any cell of group g change between versions r
// and h under policy pol?
func (s *sim) changed(r, h uint64, p Precondition, g group, pol DeletionPolicy) bool {
	P, H := s.states[r], s.states[h]
	fp, _ := P.field(g.field)
	fh, ok := H.field(g.field)
	if !ok || fp.typ != fh.typ || fp.nullable != fh.nullable {
		return true
	}
	pf := P.frags[g.frag]
	rows, _ := p.Rows.Fragment(g.frag)
	for off := range rows.Offsets(uint64(len(pf.rowIDs))) {
		o := int(off)
		liveP, valP := !pf.deleted[o], pf.value(g.field, o)
		var liveH bool
		var valH uint64
		hid, hoff, present := H.locate(pf.rowIDs[o])
		if present {
			hf := H.frags[hid]
			liveH, valH = !hf.deleted[hoff], hf.value(g.field, hoff)
		}
		if pol == Ignore {
			if present && valH != valP {
				return true
			}
			continue
		}
		if liveP != liveH || liveP && valH != valP {
			return true
		}
	}
	return false
}

// randomPreconditions draws one or two preconditions on version r.
func (s *sim) randomPreconditions(r uint64) ([]Precondition, bool) {
	st := s.states[r]
	ids := slices.Sorted(maps.Keys(st.frags))
	if len(ids) == 0 {
		return nil, false
	}
	var pre []Precondition
	for range 1 + s.rng.IntN(2) {
		fields := s.pickFields(st, 3)
		var b SelectionBuilder
		for _, i := range s.pick(seq(len(ids)), 1+s.rng.IntN(3)) {
			id := ids[i]
			n := len(st.frags[id].rowIDs)
			switch s.rng.IntN(5) {
			case 0:
				b.AddWhole(id)
			case 1:
				start := s.rng.IntN(n)
				b.AddRange(id, uint32(start), uint32(start+1+s.rng.IntN(n-start)))
			default:
				b.AddOffsets(id, toU32(s.pick(seq(n), 1+s.rng.IntN(4)))...)
			}
		}
		pre = append(pre, CellsUnchanged(b.Build(), fields...))
	}
	return pre, true
}

// wire encodes preconditions, in the structured form or (when every
// fragment id fits) Lance's row address map, at random.
func (s *sim) wire(pre []Precondition) []*lancepb.Precondition {
	out := Protos(pre)
	for i, p := range pre {
		if s.rng.IntN(2) == 0 {
			continue
		}
		b, err := p.Rows.MarshalRowAddrTreeMap()
		if err != nil {
			continue
		}
		cu := out[i].GetCellsUnchanged()
		cu.Rows, cu.RowAddrTreeMap = nil, b
	}
	return out
}
