package subject_test

import (
	"errors"
	"strings"
	"testing"

	"cellguard/internal/subject"
)

func TestValidate(t *testing.T) {
	for name, ok := range map[string]bool{
		"a": true, "orders_2024-x": true, strings.Repeat("x", 64): true,
		"": false, strings.Repeat("x", 65): false, "a.b": false, "a*": false, "a>": false,
		"a b": false, "ä": false, "a/b": false,
	} {
		err := subject.Validate(name)
		if (err == nil) != ok {
			t.Errorf("Validate(%q) = %v, want ok=%v", name, err, ok)
		}
		var de *subject.DatasetError
		if err != nil && (!errors.Is(err, subject.ErrInvalidDataset) || !errors.As(err, &de)) {
			t.Errorf("Validate(%q) = %v, not a typed *DatasetError", name, err)
		}
	}
}

func TestSchemeRoundTrip(t *testing.T) {
	var s subject.Scheme
	if got, want := s.Txn("ds1"), "cg.txn.ds1"; got != want {
		t.Errorf("Txn = %q, want %q", got, want)
	}
	if got, want := s.DecOf("ds1"), "cg.dec.ds1.*"; got != want {
		t.Errorf("DecOf = %q, want %q", got, want)
	}
	if got, want := s.TxnStream()+" "+s.DecStream()+" "+s.CheckpointBucket(), "CG_TXN CG_DEC CG_CHECKPOINTS"; got != want {
		t.Errorf("streams = %q, want %q", got, want)
	}
	ds, err := s.ParseTxn("cg.txn.ds1")
	if err != nil || ds != "ds1" {
		t.Errorf("ParseTxn = %q, %v", ds, err)
	}
	ds, o, err := s.ParseDec(s.Dec("x-1", subject.Rejected))
	if err != nil || ds != "x-1" || o != subject.Rejected {
		t.Errorf("ParseDec = %q %q %v", ds, o, err)
	}
	for _, bad := range []string{"cg.txn.", "cg.txn.a.b", "xx.txn.a"} {
		if _, err := s.ParseTxn(bad); !errors.Is(err, subject.ErrNotOurs) {
			t.Errorf("ParseTxn(%q) err = %v", bad, err)
		}
	}
	if _, _, err := s.ParseDec("cg.dec.a.maybe"); !errors.Is(err, subject.ErrNotOurs) {
		t.Errorf("ParseDec(maybe) err = %v", err)
	}
	p, err := subject.NewScheme("team-a")
	if err != nil || p.Txn("d") != "team-a.txn.d" || p.DecStream() != "TEAM_A_DEC" {
		t.Errorf("NewScheme(team-a) = %v %v", p, err)
	}
	if _, err := subject.NewScheme("a.b"); !errors.Is(err, subject.ErrInvalidPrefix) {
		t.Errorf("NewScheme(a.b) err = %v", err)
	}
	if c := s.Consumer("bad$name.x"); c == "commit-bad$name.x" || len(c) > 40 {
		t.Errorf("Consumer(invalid) = %q, want a hashed name", c)
	}
	ds, v, err := subject.ParseCheckpointKey(subject.CheckpointKey("d", 42))
	if err != nil || ds != "d" || v != 42 {
		t.Errorf("checkpoint key round trip = %q %d %v", ds, v, err)
	}
}
