package declog_test

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"cellguard/internal/declog"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

// TestLargeCreationStoredCompressed appends a creation of many fragments
// and reads it back with every reader: the stream holds a fraction of the
// transaction's bytes, and every reader sees the transaction as staged.
func TestLargeCreationStoredCompressed(t *testing.T) {
	l, js, sc := openLog(t)
	ctx := t.Context()
	ds := "wide"
	d := committed(t, ds, 1)
	ow := &lancepb.Transaction_Overwrite{Schema: schema}
	for i := range 400 {
		ow.Fragments = append(ow.Fragments, fragment(fmt.Sprintf("%08x-5e4d-4c3b-8a29-18f7e6d5c4b3.lance", i)))
	}
	txn := &lancepb.Transaction{Uuid: d.TxnUuid, Operation: &lancepb.Transaction_Overwrite_{Overwrite: ow}}
	b, err := proto.Marshal(txn)
	if err != nil {
		t.Fatal(err)
	}
	d.Transaction = b
	if _, err := l.Append(ctx, ds, 0, []*cellguardpb.Decision{d}); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, sc.DecStream())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw.Data) > len(b)/4 {
		t.Fatalf("the log stores %d bytes for a %d-byte transaction", len(raw.Data), len(b))
	}
	last, ok, err := l.Last(ctx, sc.Dec(ds, subject.Committed))
	if err != nil || !ok || !proto.Equal(last.Decision, d) {
		t.Fatalf("Last = %v, %v, %v; want the decision as appended", last.Decision, ok, err)
	}
	m, _, err := l.Load(ctx, ds, 0, nil)
	if err != nil || m.NumFragments() != 400 {
		t.Fatalf("Load = %v, %v; want 400 fragments", m, err)
	}
}

// TestParseRefusesBadCompressedTransaction: a record carrying its
// transaction both plain and compressed, or a frame that does not decode,
// is a malformed record.
func TestParseRefusesBadCompressedTransaction(t *testing.T) {
	sc, _ := subject.NewScheme("")
	msg, err := declog.Message(sc, rejected("a", "x", 1))
	if err != nil {
		t.Fatal(err)
	}
	for name, extra := range map[string][]byte{
		"both":    protowire.AppendBytes(protowire.AppendTag(protowire.AppendBytes(protowire.AppendTag(nil, 5, protowire.BytesType), []byte{1}), 17, protowire.BytesType), []byte{0x28, 0xb5, 0x2f, 0xfd}),
		"corrupt": protowire.AppendBytes(protowire.AppendTag(nil, 17, protowire.BytesType), []byte("not a zstd frame")),
	} {
		body := append(append([]byte(nil), msg.Data...), extra...)
		if _, err := declog.Parse(sc, 1, msg.Subject, msg.Header, body); !errors.Is(err, declog.ErrMalformedRecord) {
			t.Errorf("%s: Parse = %v; want ErrMalformedRecord", name, err)
		}
	}
}
