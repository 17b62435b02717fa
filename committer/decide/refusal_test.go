package decide

import (
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

// attempt is a staged message as the Lance REST namespace stages one:
// the transaction, a message id of its own, the proposed version and,
// for a refused transaction, the refusal.
type attempt struct {
	txn      *lancepb.Transaction
	msgID    string
	proposed uint64
	refusal  string
}

func (a attempt) staged(t *testing.T, seq uint64) Staged {
	hdr := nats.Header{}
	if a.proposed > 0 {
		hdr.Set("Cg-Proposed-Version", strconv.FormatUint(a.proposed, 10))
	}
	if a.refusal != "" {
		hdr.Set("Cg-Refusal", a.refusal)
		hdr.Set("Cg-Refusal-Message", "manifest for version 4 differs from the committed state in: fragments[id=1]")
	}
	return Staged{Seq: seq, Data: mustMarshal(t, a.txn), MsgID: a.msgID, Header: hdr}
}

// TestProposedVersionAndRefusals decides, in one order, what the namespace
// stages around SDK commits: an attempt whose proposed version was taken
// meanwhile is rejected VERSION_MOVED under its own identity, and the same
// transaction's next attempt commits; a uuid commits once, whatever its
// later attempts propose; a refusal becomes a rejection with its reason.
func TestProposedVersionAndRefusals(t *testing.T) {
	h := newMemHistory()
	st := NewState("ds", Limits{MaxTxnBytes: 1 << 20, Window: 8, MaxLag: 100}, h)
	sdk, a, b, r := newUUID(), newUUID(), newUUID(), newUUID()
	type want struct {
		skip    bool
		id      string
		reason  cellguardpb.Reason
		version uint64
	}
	steps := []struct {
		what string
		in   attempt
		want want
	}{
		{"create", attempt{txn: createTxn(sdk)}, want{id: sdk, version: 1}},
		{"a proposes 2", attempt{txn: appendTxn(a, 1), msgID: a + "@2", proposed: 2}, want{id: a, version: 2}},
		{"b proposes 2, taken", attempt{txn: appendTxn(b, 1), msgID: b + "@2", proposed: 2}, want{id: b + "@2", reason: cellguardpb.Reason_VERSION_MOVED}},
		{"b's same attempt again", attempt{txn: appendTxn(b, 1), msgID: b + "@2", proposed: 2}, want{skip: true}},
		{"b proposes 3", attempt{txn: appendTxn(b, 1), msgID: b + "@3", proposed: 3}, want{id: b, version: 3}},
		{"b committed: proposes 4", attempt{txn: appendTxn(b, 1), msgID: b + "@4", proposed: 4}, want{skip: true}},
		{"a committed: proposes 4", attempt{txn: appendTxn(a, 1), msgID: a + "@4", proposed: 4}, want{skip: true}},
		{"ahead of the head", attempt{txn: appendTxn(newUUID(), 3), msgID: "x@9", proposed: 9}, want{id: "x@9", reason: cellguardpb.Reason_VERSION_MOVED}},
		{"no proposal: an SDK commit", attempt{txn: appendTxn(r, 3), msgID: r}, want{id: r, version: 4}},
		{"refused", attempt{txn: appendTxn(newUUID(), 4), msgID: "m@5", proposed: 5, refusal: "MANIFEST_MISMATCH"}, want{reason: cellguardpb.Reason_MANIFEST_MISMATCH}},
		{"refused for an unknown reason", attempt{txn: appendTxn(newUUID(), 4), refusal: "COMMIT_ANYWAY"}, want{reason: cellguardpb.Reason_INVALID_TRANSACTION}},
	}
	for i, s := range steps {
		seq := uint64(i + 1)
		m := st.Mark()
		in := s.in.staged(t, seq)
		v := st.Decide(t.Context(), in)
		if v.Skip != s.want.skip {
			t.Fatalf("%s: skip %v, want %v (%+v)", s.what, v.Skip, s.want.skip, v.Rec)
		}
		if v.Skip {
			if err := st.CheckDecided(in); err != nil {
				t.Errorf("%s: skipped, but a redelivery would not be: %v", s.what, err)
			}
			continue
		}
		st.Commit(m, []*cellguardpb.Decision{v.Rec}, []uint64{seq})
		if v.Next != nil {
			h.Manifests[v.Next.Version()], h.Txns[v.Next.Version()] = v.Next, mustCommitted(t, v)
		}
		got := v.Rec
		id := s.want.id
		if id == "" {
			id = s.in.txn.GetUuid()
		}
		if got.TxnUuid != id || got.Reason != s.want.reason || got.Version != s.want.version {
			t.Errorf("%s: %q %v version %d (%s), want %q %v version %d", s.what, got.TxnUuid, got.Reason, got.Version, got.Message, id, s.want.reason, s.want.version)
		}
		// A redelivery of the decided message is recognised as decided.
		if err := st.CheckDecided(in); err != nil {
			t.Errorf("%s: %v", s.what, err)
		}
	}
	if st.HeadVersion() != 4 {
		t.Errorf("head %d, want 4", st.HeadVersion())
	}
}

// TestProposedVersionHeaderMalformed: a proposed version that is not a
// positive number rejects the transaction as invalid (under its uuid).
func TestProposedVersionHeaderMalformed(t *testing.T) {
	h := newMemHistory()
	st := NewState("ds", Limits{MaxTxnBytes: 1 << 20, Window: 8, MaxLag: 100}, h)
	id := newUUID()
	for _, p := range []string{"0", "two", "-1", strings.Repeat("9", 40)} {
		in := Staged{Seq: 1, Data: mustMarshal(t, createTxn(id)), Header: nats.Header{"Cg-Proposed-Version": {p}}}
		m := st.Mark()
		v := st.Decide(t.Context(), in)
		st.Rollback(m)
		if v.Skip || v.Rec.Reason != cellguardpb.Reason_INVALID_TRANSACTION || v.Rec.TxnUuid != id {
			t.Errorf("proposed %q: %+v, want INVALID_TRANSACTION of %s", p, v.Rec, id)
		}
	}
}
