package nemesis

import "testing"

// TestCheck: each kind of disagreement between the clients and the log
// is counted once; a consistent run is OK.
func TestCheck(t *testing.T) {
	log := map[string][]Decided{"a": {{"t1", 1}, {"t2", 2}, {"t3", 3}}}
	ok := []Op{
		{Client: 1, Dataset: "a", Txn: "t2", Result: Committed, Version: 2},
		{Client: 2, Dataset: "a", Txn: "t3", Result: Unknown},
		{Client: 2, Dataset: "a", Txn: "t9", Result: Rejected},
		{Client: 2, Dataset: "a", Kind: Read, Version: 3},
	}
	if r := Check(ok, log); !r.OK() || r.Acknowledged != 1 || r.Unknown != 1 || r.Rejected != 1 || r.InLog != 3 {
		t.Fatalf("consistent run: %v %v", r, r.Problems)
	}
	for _, tc := range []struct {
		name string
		ops  []Op
		log  map[string][]Decided
		want func(Report) int
	}{
		{"lost", []Op{{Txn: "t4", Result: Committed, Version: 4}}, log, func(r Report) int { return r.Lost }},
		{"wrong version", []Op{{Txn: "t2", Result: Committed, Version: 3}}, log, func(r Report) int { return r.Wrong }},
		{"rejected but committed", []Op{{Txn: "t1", Result: Rejected}}, log, func(r Report) int { return r.Wrong }},
		{"duplicated", nil, map[string][]Decided{"a": {{"t1", 1}, {"t1", 2}}}, func(r Report) int { return r.Duplicated }},
		{"gap", nil, map[string][]Decided{"a": {{"t1", 1}, {"t2", 3}}}, func(r Report) int { return r.Gaps }},
		{"reordered", nil, map[string][]Decided{"a": {{"t1", 2}, {"t2", 1}}}, func(r Report) int { return r.Gaps }},
	} {
		r := Check(tc.ops, tc.log)
		if r.OK() || tc.want(r) == 0 || len(r.Problems) == 0 {
			t.Errorf("%s: %v %v", tc.name, r, r.Problems)
		}
	}
}
