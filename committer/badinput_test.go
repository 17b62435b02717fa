package committer

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"cellguard/internal/natstest"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

// TestBadInputs stages a corpus of bad transactions between good ones:
// every bad one gets a typed rejection, and the good ones behind them
// commit.
func TestBadInputs(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	cfg.MaxTxnBytes = 64 << 10
	start(t, srv.URL(), cfg)
	ds := "bad"
	create := newUUID()
	stage(t, js, ds, create, mustMarshal(t, createTxn(create)))
	waitDecided(t, js, ds, 1, 5*time.Second)

	valid := mustMarshal(t, appendTxn(newUUID(), 1))
	unknownOp := protowire.AppendTag(mustMarshal(t, &lancepb.Transaction{Uuid: newUUID(), ReadVersion: 1}), 150, protowire.BytesType)
	unknownOp = protowire.AppendBytes(unknownOp, []byte{1, 2, 3})
	big := appendTxn(newUUID(), 1)
	big.TransactionProperties = map[string]string{"pad": strings.Repeat("x", 100<<10)}
	overwrite := createTxn(newUUID())
	overwrite.ReadVersion = 1
	cases := []struct {
		name string
		ds   string
		body []byte
		want cellguardpb.Reason
	}{
		{"garbage bytes", ds, []byte("\xff\xfe not a protobuf at all \x00\x01"), cellguardpb.Reason_INVALID_TRANSACTION},
		{"truncated protobuf", ds, valid[:len(valid)-7], cellguardpb.Reason_INVALID_TRANSACTION},
		{"unknown operation", ds, unknownOp, cellguardpb.Reason_INVALID_TRANSACTION},
		{"no operation", ds, mustMarshal(t, &lancepb.Transaction{Uuid: newUUID(), ReadVersion: 1}), cellguardpb.Reason_INVALID_TRANSACTION},
		{"no uuid", ds, mustMarshal(t, appendTxn("", 1)), cellguardpb.Reason_INVALID_TRANSACTION},
		{"negative field id", ds, mustMarshal(t, withPre(appendTxn(newUUID(), 1), cellsUnchanged([]int32{-1}, wholeFragment(0)))), cellguardpb.Reason_INVALID_PRECONDITION},
		{"bad bitmap", ds, mustMarshal(t, withPre(appendTxn(newUUID(), 1), cellsUnchanged([]int32{1},
			&lancepb.FragmentRows{FragmentId: 0, Selection: &lancepb.FragmentRows_OffsetBitmap{OffsetBitmap: []byte{0x3b, 0x30, 0xff, 0xff, 9}}}))), cellguardpb.Reason_INVALID_PRECONDITION},
		{"precondition on unknown fragment", ds, mustMarshal(t, withPre(appendTxn(newUUID(), 1), cellsUnchanged([]int32{1}, wholeFragment(99)))), cellguardpb.Reason_INVALID_PRECONDITION},
		{"precondition on overwrite", ds, mustMarshal(t, withPre(overwrite, cellsUnchanged([]int32{1}, wholeFragment(0)))), cellguardpb.Reason_INVALID_PRECONDITION},
		{"read version in future", ds, mustMarshal(t, appendTxn(newUUID(), 99)), cellguardpb.Reason_READ_VERSION_IN_FUTURE},
		{"create existing", ds, mustMarshal(t, createTxn(newUUID())), cellguardpb.Reason_DATASET_EXISTS},
		{"oversize", ds, mustMarshal(t, big), cellguardpb.Reason_TOO_LARGE},
		{"unknown dataset", "nosuch", mustMarshal(t, appendTxn(newUUID(), 1)), cellguardpb.Reason_UNKNOWN_DATASET},
		{"dataset name too long", strings.Repeat("n", 70), mustMarshal(t, appendTxn(newUUID(), 1)), cellguardpb.Reason_INVALID_DATASET_NAME},
		{"dataset name with $", "bad$name", mustMarshal(t, appendTxn(newUUID(), 1)), cellguardpb.Reason_INVALID_DATASET_NAME},
	}
	byDS := map[string]int{}
	for i, c := range cases {
		stage(t, js, c.ds, "bad-"+string(rune('a'+i)), c.body)
		byDS[c.ds]++
	}
	good := newUUID()
	stage(t, js, ds, good, mustMarshal(t, appendTxn(good, 1)))
	byDS[ds]++
	logs := map[string][]logged{}
	for d, n := range byDS {
		want := n
		if d == ds {
			want++ // the creation
		}
		logs[d] = waitDecided(t, js, d, want, 10*time.Second)
	}
	next := map[string]int{ds: 1}
	for _, c := range cases {
		e := logs[c.ds][next[c.ds]]
		next[c.ds]++
		if e.rec.Outcome != cellguardpb.Outcome_OUTCOME_REJECTED || e.rec.Reason != c.want {
			t.Errorf("%s: decision %v %v (%s), want rejected %v", c.name, e.rec.Outcome, e.rec.Reason, e.rec.Message, c.want)
		}
		if e.rec.Message == "" {
			t.Errorf("%s: rejection has no message", c.name)
		}
	}
	last := logs[ds][len(logs[ds])-1].rec
	if last.TxnUuid != good || last.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED || last.Version != 2 {
		t.Errorf("good txn after the corpus: %v, want committed at version 2", last)
	}
}
