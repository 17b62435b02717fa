package logrec

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// TestEncodeMatchesMarshal checks that Encode's bodies are proto.Marshal's
// bytes, for records with every field zero or set, plain or not.
func TestEncodeMatchesMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	str := func() string {
		switch r.IntN(4) {
		case 0:
			return ""
		case 1:
			return "dé\u00e9jà"
		}
		return string(rune('a'+r.IntN(26))) + "-" + string(rune('0'+r.IntN(10)))
	}
	num := func() uint64 {
		switch r.IntN(3) {
		case 0:
			return 0
		case 1:
			return uint64(r.IntN(200))
		}
		return r.Uint64()
	}
	plain := 0
	for range 5000 {
		d := &cellguardpb.Decision{
			Dataset: str(), TxnUuid: str(), Outcome: cellguardpb.Outcome(r.IntN(4) - 1), Version: num(),
			TxnSeq: num(), ReadVersion: num(), Reason: cellguardpb.Reason(r.IntN(30) - 1), Message: str(),
			HeadVersion: num(), ConflictVersion: num(), ConflictTxnUuid: str(),
		}
		if r.IntN(2) == 0 {
			d.Transaction = make([]byte, r.IntN(300))
		}
		switch r.IntN(8) {
		case 0:
			d.Violations = []*cellguardpb.Violation{{FieldId: 1}}
		case 1:
			d.DatasetConfig = &cellguardpb.DatasetConfig{}
		case 2:
			d.AdoptedManifest = []byte{1}
		}
		if plainDecision(d) {
			plain++
		}
		want, err := proto.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Encode(d)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Body, want) {
			t.Fatalf("Encode(%v) =\n%x\nwant\n%x", d, got.Body, want)
		}
		if plainDecision(d) && cap(got.Body) != len(got.Body) {
			t.Fatalf("Encode(%v) allocated %d bytes for %d", d, cap(got.Body), len(got.Body))
		}
	}
	if plain < 2000 {
		t.Fatalf("only %d plain records: the fast encoding was hardly tested", plain)
	}
}

// TestEncodeInvalidUTF8 checks that a record Marshal refuses is refused.
func TestEncodeInvalidUTF8(t *testing.T) {
	if _, err := Encode(&cellguardpb.Decision{Dataset: "ds", Message: "\xff"}); err == nil {
		t.Fatal("a message that is not UTF-8 encoded")
	}
}

// TestEncodeEveryField sets each field of a decision in turn: either the
// direct encoding declines it or its bytes are Marshal's (the compressed
// transaction, which only the log's writer sets, is refused). A field added to
// Decision cannot be dropped silently.
func TestEncodeEveryField(t *testing.T) {
	fields := (&cellguardpb.Decision{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		d := &cellguardpb.Decision{}
		m := d.ProtoReflect()
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			l.Append(l.NewElement())
		case fd.Message() != nil:
			m.Mutable(fd)
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString("x"))
		case fd.Kind() == protoreflect.BytesKind:
			m.Set(fd, protoreflect.ValueOfBytes([]byte{7}))
		case fd.Kind() == protoreflect.EnumKind:
			m.Set(fd, protoreflect.ValueOfEnum(1))
		case fd.Kind() == protoreflect.Uint64Kind:
			m.Set(fd, protoreflect.ValueOfUint64(7))
		default:
			t.Fatalf("field %s: kind %v not handled by this test", fd.Name(), fd.Kind())
		}
		if fd.Number() == decTransactionZstd {
			if _, err := Encode(d); err == nil {
				t.Errorf("field %s: Encode accepted a transaction its writer compressed", fd.Name())
			}
			continue
		}
		want, err := proto.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Encode(d)
		if err != nil || !bytes.Equal(got.Body, want) {
			t.Errorf("field %s: Encode = %x, %v; want %x", fd.Name(), got.Body, err, want)
		}
	}
}

// TestEncodeLandedMatchesEncode checks table.Land and EncodeLanded
// against their plain meaning: the transaction set to
// table.WithReadVersion(staged, rv), then Encode. Bodies, transactions,
// sizes and errors must agree, for plain records and others, staged
// bodies with and without a read version (and with a duplicated one), and
// malformed ones.
func TestEncodeLandedMatchesEncode(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for i := range 3000 {
		txn := &lancepb.Transaction{Uuid: fmt.Sprintf("u-%d", i), ReadVersion: uint64(r.IntN(3)) * r.Uint64N(1<<40)}
		if r.IntN(2) == 0 {
			txn.Tag = strings.Repeat("t", r.IntN(200))
		}
		staged, err := proto.Marshal(txn)
		if err != nil {
			t.Fatal(err)
		}
		switch r.IntN(6) {
		case 0: // a second read_version field, as a hand-made body may have
			staged = protowire.AppendVarint(protowire.AppendTag(staged, 1, protowire.VarintType), 5)
		case 1: // truncated: malformed
			staged = staged[:len(staged)-1-r.IntN(min(3, len(staged)))]
		}
		rv := uint64(r.IntN(2)) * r.Uint64N(1<<50)
		d := &cellguardpb.Decision{Dataset: "ds", TxnUuid: txn.Uuid, Outcome: cellguardpb.Outcome_OUTCOME_COMMITTED,
			Version: r.Uint64N(100), TxnSeq: r.Uint64N(100), ReadVersion: rv, HeadVersion: r.Uint64N(100)}
		if r.IntN(4) == 0 {
			d.Violations = []*cellguardpb.Violation{{FieldId: 1}}
		}
		want := proto.CloneOf(d)
		wantTxn, wantErr := table.WithReadVersion(staged, rv)
		landed, err := table.Land(staged, rv)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("Land error %v; WithReadVersion's %v", err, wantErr)
		}
		if err != nil {
			if !errors.Is(err, table.ErrMalformed) {
				t.Fatalf("malformed body: %v", err)
			}
			continue
		}
		if landed.Len() != len(wantTxn) {
			t.Fatalf("Land measures %d bytes; WithReadVersion makes %d", landed.Len(), len(wantTxn))
		}
		got, err := EncodeLanded(d, landed)
		if err != nil {
			t.Fatal(err)
		}
		want.Transaction = wantTxn
		wantEnc, err := Encode(want)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Body, wantEnc.Body) || !bytes.Equal(d.Transaction, wantTxn) {
			t.Fatalf("EncodeLanded =\n%x (transaction %x)\nwant\n%x (transaction %x)", got.Body, d.Transaction, wantEnc.Body, wantTxn)
		}
		if plainDecision(want) && cap(got.Body) != len(got.Body) {
			t.Fatalf("EncodeLanded allocated %d bytes for %d", cap(got.Body), len(got.Body))
		}
	}
}
