package declog

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"cellguard/proto/cellguardpb"
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
// direct encoding declines it or its bytes are Marshal's. A field added to
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
