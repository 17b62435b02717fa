package decide

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"cellguard/internal/subject"
)

// TestIDSetMatchesMap checks the decided-id set against a plain Go map:
// uuids added (one by one and in bulk, as from a checkpoint), removed
// (rollback, from pending and from the runs) and added again, through
// flushes, merges and the filter's rebuilds, looked up present and
// absent, and listed (each, as a checkpoint takes them). Besides random
// uuids it adds ordered and clustered ones, which the uniform guess of
// findKey places badly, so the widening search is exercised too.
func TestIDSetMatchesMap(t *testing.T) {
	for _, kind := range []string{"random", "ordered", "clustered"} {
		t.Run(kind, func(t *testing.T) {
			r := rand.New(rand.NewPCG(5, 6))
			next := 0
			newID := func() string {
				next++
				switch kind {
				case "ordered":
					return fmt.Sprintf("%08x-0000-4000-8000-%012x", next/7, next)
				case "clustered":
					return fmt.Sprintf("0000%04x-0000-4000-8000-%012x", r.IntN(4), r.Uint64()>>16)
				}
				return newUUID()
			}
			checkIDSet(t, r, newID)
		})
	}
}

func checkIDSet(t *testing.T, r *rand.Rand, newID func() string) {
	s := newIDSet()
	ref := map[string]bool{}
	var ids []string
	maxRuns := 0
	for step := range 12 * idPending {
		maxRuns = max(maxRuns, len(s.runs))
		quiet := step/(4*idPending)%2 == 1 // no removes: runs pile up and merge
		switch op := r.IntN(20); {
		case op < 12 || len(ids) == 0 || quiet && op < 15:
			id := newID()
			if r.IntN(50) == 0 {
				id = fmt.Sprintf("seq-%d", step) // not a uuid
			}
			if k, ok := uuidKey(id); ok && r.IntN(3) == 0 {
				s.addKey(k)
			} else {
				s.add(id)
			}
			ref[id] = true
			ids = append(ids, id)
		case op < 15: // a rollback of the latest decisions, or of any
			id := ids[len(ids)-1-r.IntN(min(len(ids), 2000))]
			if r.IntN(4) == 0 {
				id = ids[r.IntN(len(ids))]
			}
			s.remove(id)
			delete(ref, id)
		default:
			id := ids[r.IntN(len(ids))]
			s.add(id)
			ref[id] = true
		}
		if s.len() != len(ref) {
			t.Fatalf("step %d: len %d; want %d", step, s.len(), len(ref))
		}
		for range 3 {
			id := ids[r.IntN(len(ids))]
			if s.Has(id) != ref[id] {
				t.Fatalf("step %d: has(%s) = %v; want %v", step, id, s.Has(id), ref[id])
			}
		}
		if id := newID(); s.Has(id) {
			t.Fatalf("step %d: has %s, never added", step, id)
		}
		if step%idPending == 0 {
			checkEach(t, &s, ref)
		}
	}
	for _, id := range ids {
		if s.Has(id) != ref[id] {
			t.Fatalf("has(%s) = %v; want %v", id, s.Has(id), ref[id])
		}
	}
	checkEach(t, &s, ref)
	if maxRuns < 2 {
		t.Errorf("at most %d runs: the test did not reach merging", maxRuns)
	}
}

// checkEach checks that each lists every uuid of ref once and nothing
// else.
func checkEach(t *testing.T, s *idSet, ref map[string]bool) {
	t.Helper()
	want := 0
	for id := range ref {
		if _, ok := uuidKey(id); ok {
			want++
		}
	}
	seen := map[idKey]bool{}
	s.each(func(k idKey) {
		b := k.bytes()
		id := fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
		if seen[k] || !ref[id] {
			t.Fatalf("each: %s listed twice or not in the set", id)
		}
		seen[k] = true
	})
	if len(seen) != want {
		t.Fatalf("each listed %d uuids; want %d", len(seen), want)
	}
}

// TestSortKeys checks sortKeys against a comparison sort, on keys that
// are random (buckets of about one), clustered (one bucket, a comparison
// sort) and in between (buckets of a few, insertion).
func TestSortKeys(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, shift := range []uint{0, 8, 52, 60, 64} {
		for _, n := range []int{0, 1, 2, 17, 100, idPending} {
			ks := make([]idKey, n)
			for i := range ks {
				ks[i] = idKey{r.Uint64() >> shift, r.Uint64() >> (shift / 2)}
			}
			want := slices.Clone(ks)
			slices.SortFunc(want, cmpKey)
			got := make([]idKey, n)
			sortKeys(ks, got)
			if !slices.Equal(got, want) {
				t.Fatalf("shift %d, %d keys: sortKeys differs from a comparison sort", shift, n)
			}
		}
	}
}

// TestFindKey checks the widening search against a linear one, on runs
// whose keys are uniform, clustered at one end, and all equal but one.
func TestFindKey(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for n := range 70 {
		for _, shape := range []func() idKey{
			func() idKey { return idKey{r.Uint64(), r.Uint64()} },
			func() idKey { return idKey{r.Uint64() >> 60, r.Uint64() >> 62} },
			func() idKey { return idKey{^uint64(0) - r.Uint64()>>62, r.Uint64() >> 62} },
		} {
			seen := map[idKey]bool{}
			var run []idKey
			for range n {
				if k := shape(); !seen[k] {
					seen[k] = true
					run = append(run, k)
				}
			}
			run = sortedKeys(run)
			for range 50 {
				k := shape()
				got, found := findKey(run, k)
				want := 0
				for want < len(run) && cmpKey(run[want], k) < 0 {
					want++
				}
				if got != want || found != seen[k] {
					t.Fatalf("findKey(%d keys, %x) = %d, %v; want %d, %v", len(run), k, got, found, want, seen[k])
				}
			}
		}
	}
}

func sortedKeys(ks []idKey) []idKey {
	slices.SortFunc(ks, cmpKey)
	return ks
}

// BenchmarkIDSetAdd adds b.N new random uuids to a decided-id set, each
// looked up first, as deciding does.
func BenchmarkIDSetAdd(b *testing.B) {
	keys := make([]idKey, b.N)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range keys {
		keys[i] = idKey{r.Uint64(), r.Uint64()}
	}
	s := newIDSet()
	b.ResetTimer()
	for _, k := range keys {
		if s.hasKey(k) {
			b.Fatal("a new uuid is in the set")
		}
		s.addKey(k)
	}
}

// TestIDSetFilterRate checks that the filter lets through few of the
// uuids not in the set (a lookup it lets through searches the runs).
func TestIDSetFilterRate(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	s := newIDSet()
	for range 100000 {
		s.addKey(idKey{r.Uint64(), r.Uint64()})
	}
	through := 0
	const tries = 100000
	for range tries {
		if s.mayHave(idKey{r.Uint64(), r.Uint64()}) {
			through++
		}
	}
	if rate := float64(through) / tries; rate > 0.02 {
		t.Errorf("the filter lets through %.2f %% of new uuids; want at most 2 %%", 100*rate)
	} else {
		t.Logf("the filter lets through %.2f %% of new uuids", 100*rate)
	}
}

// TestValidTxnIDMatchesSubject checks validTxnID's shortcut against
// subject.ValidTxnID: on uuids in every case, on ids near a uuid's shape
// (a digit or dash changed to anything, cut short, grown), on the
// reserved prefix, and on random printable and unprintable strings. The
// two must accept and refuse the same ids.
func TestValidTxnIDMatchesSubject(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	ids := []string{"", "seq-1", "SEQ-12", "seq-00000000-0000-4000-8000-000000000000", strings.Repeat("a", subject.MaxTxnIDLen+1)}
	for range 2000 {
		u := []byte(newUUID())
		ids = append(ids, string(u), strings.ToUpper(string(u)))
		i := r.IntN(len(u))
		u[i] = byte(r.IntN(256))
		ids = append(ids, string(u), string(u[:r.IntN(len(u))]), string(u)+"x")
		ids = append(ids, "seq-"+string(u[4:]))
		b := make([]byte, r.IntN(40))
		for j := range b {
			b[j] = byte(r.IntN(128))
		}
		ids = append(ids, string(b))
	}
	for _, id := range ids {
		want, got := subject.ValidTxnID(id) == nil, validTxnID(idOf(id)) == nil
		if got != want {
			t.Fatalf("validTxnID(%q) accepts %v, subject.ValidTxnID %v", id, got, want)
		}
	}
}

// TestPendingSetMatchesMap checks the pending uuids' open-addressed index
// against a Go map: random adds and removes (backward-shift deletion, the
// last key moving into a removed one's place) in a table of 16 slots,
// where probes wrap around and collide all the time, and in the full-size
// one; after every step every key added is found exactly when the map
// has it, and keys holds exactly the map's keys.
func TestPendingSetMatchesMap(t *testing.T) {
	for _, small := range []bool{true, false} {
		r := rand.New(rand.NewPCG(7, 8))
		p := newPendingSet()
		limit := idPending
		if small { // never grown: at most half full
			p.slots, limit = make([]uint16, 16), 8
		}
		ref := map[idKey]bool{}
		var all []idKey
		for step := range 20000 {
			if len(ref) < limit && (r.IntN(3) > 0 || len(ref) == 0) {
				k := idKey{r.Uint64(), r.Uint64()}
				if small {
					k = idKey{r.Uint64N(40), 0} // few keys, added again after removal
				}
				if !ref[k] {
					p.add(k)
					ref[k] = true
					all = append(all, k)
				}
			} else {
				k := all[r.IntN(len(all))]
				if got := p.remove(k); got != ref[k] {
					t.Fatalf("step %d: remove(%v) = %v; want %v", step, k, got, ref[k])
				}
				delete(ref, k)
			}
			if !small && step%100 != 0 {
				continue
			}
			for _, k := range all {
				if p.has(k) != ref[k] {
					t.Fatalf("step %d: has(%v) = %v; want %v", step, k, p.has(k), ref[k])
				}
			}
			if p.len() != len(ref) {
				t.Fatalf("step %d: len %d; want %d", step, p.len(), len(ref))
			}
			for _, k := range p.keys {
				if !ref[k] {
					t.Fatalf("step %d: keys holds %v, not in the set", step, k)
				}
			}
		}
	}
}
