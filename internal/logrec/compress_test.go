package logrec

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// creation is the staged bytes of an overwrite of n fragments, each with
// its own file: the shape of a table's first version.
func creation(t *testing.T, n int) []byte {
	t.Helper()
	txn := &lancepb.Transaction{Uuid: "0b4c5a9e-1d2f-4c3b-9a8e-7f6d5c4b3a29", ReadVersion: 0}
	ow := &lancepb.Transaction_Overwrite{Schema: []*lancepb.Field{{Id: 0, Name: "id", ParentId: -1, LogicalType: "int64"}}}
	for i := range n {
		ow.Fragments = append(ow.Fragments, &lancepb.DataFragment{Id: uint64(i), PhysicalRows: 1000, Files: []*lancepb.DataFile{{
			Path: fmt.Sprintf("%08x-3c2b-4a19-8e7d-6c5b4a392817.lance", i), Fields: []int32{0}, ColumnIndices: []int32{0}, FileMajorVersion: 2, FileMinorVersion: 1,
		}}})
	}
	txn.Operation = &lancepb.Transaction_Overwrite_{Overwrite: ow}
	b, err := proto.Marshal(txn)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decodeExpanded is what the log's reader does with a body.
func decodeExpanded(t *testing.T, body []byte) *cellguardpb.Decision {
	t.Helper()
	d := &cellguardpb.Decision{}
	if err := proto.Unmarshal(body, d); err != nil {
		t.Fatal(err)
	}
	if err := Expand(d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestCompressLargeTransaction checks that a large transaction is stored
// compressed, that the record reads back as the one Marshal would have
// written, and that the decision in memory keeps its plain transaction.
func TestCompressLargeTransaction(t *testing.T) {
	txn := creation(t, 300)
	for _, d := range []*cellguardpb.Decision{
		{Dataset: "ds", TxnUuid: "u", Outcome: cellguardpb.Outcome_OUTCOME_COMMITTED, Version: 1, TxnSeq: 4, Transaction: txn},
		{Dataset: "ds", TxnUuid: "u", Outcome: cellguardpb.Outcome_OUTCOME_REJECTED, TxnSeq: 4, Transaction: txn,
			Violations: []*cellguardpb.Violation{{FieldId: 1}}, Message: "changed"},
	} {
		plain, err := proto.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		e, err := Encode(d)
		if err != nil {
			t.Fatal(err)
		}
		if len(e.Body) > len(plain)/4 {
			t.Fatalf("%s: %d bytes stored for a %d-byte record", d.Outcome, len(e.Body), len(plain))
		}
		if !bytes.Equal(d.Transaction, txn) {
			t.Fatalf("%s: Encode changed the decision's transaction", d.Outcome)
		}
		got := decodeExpanded(t, e.Body)
		if !proto.Equal(got, d) {
			t.Fatalf("%s: read back %v\nwant %v", d.Outcome, got, d)
		}
	}
}

// TestCompressLanded checks EncodeLanded on a large staged body: the
// record is compressed and reads back with the landed transaction.
func TestCompressLanded(t *testing.T) {
	staged := creation(t, 200)
	landed, err := table.Land(staged, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := &cellguardpb.Decision{Dataset: "ds", TxnUuid: "u", Outcome: cellguardpb.Outcome_OUTCOME_COMMITTED, Version: 1}
	e, err := EncodeLanded(d, landed)
	if err != nil {
		t.Fatal(err)
	}
	want, err := table.WithReadVersion(staged, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(d.Transaction, want) || len(e.Body) >= len(want)/4 {
		t.Fatalf("transaction %d bytes (want %d), body %d bytes", len(d.Transaction), len(want), len(e.Body))
	}
	if got := decodeExpanded(t, e.Body); !bytes.Equal(got.Transaction, want) {
		t.Fatal("the landed transaction does not read back")
	}
}

// TestCompressOnlyWhenItPays checks that small transactions, and large
// ones that do not compress, are stored as Marshal writes them.
func TestCompressOnlyWhenItPays(t *testing.T) {
	noise := make([]byte, 8<<10)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range noise {
		noise[i] = byte(r.Uint32())
	}
	small := creation(t, 3)
	if len(small) >= compressMin {
		t.Fatalf("a %d-byte transaction is not small", len(small))
	}
	for _, txn := range [][]byte{small, noise} {
		d := &cellguardpb.Decision{Dataset: "ds", TxnUuid: "u", Outcome: cellguardpb.Outcome_OUTCOME_COMMITTED, Version: 2, Transaction: txn}
		want, err := proto.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		e, err := Encode(d)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(e.Body, want) {
			t.Fatalf("a %d-byte transaction was rewritten", len(txn))
		}
	}
}

// TestExpandRefuses checks the records Expand must not accept: both
// forms set, a frame that does not decode, one that expands to nothing,
// and one whose content is larger than any record may carry.
func TestExpandRefuses(t *testing.T) {
	enc := txnEnc
	good := enc.EncodeAll(creation(t, 50), nil)
	huge := enc.EncodeAll(make([]byte, maxExpanded+1), nil)
	for name, d := range map[string]*cellguardpb.Decision{
		"both":      {Transaction: []byte{1}, TransactionZstd: good},
		"corrupt":   {TransactionZstd: good[:len(good)/2]},
		"not zstd":  {TransactionZstd: []byte("not a frame")},
		"empty":     {TransactionZstd: enc.EncodeAll(nil, nil)},
		"too large": {TransactionZstd: huge},
	} {
		if err := Expand(d); !errors.Is(err, errCompressed) {
			t.Errorf("%s: Expand = %v", name, err)
		}
	}
	// A body with field 17 set by hand reads back through Expand.
	d := &cellguardpb.Decision{Dataset: "ds"}
	body, err := proto.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	body = protowire.AppendBytes(protowire.AppendTag(body, decTransactionZstd, protowire.BytesType), good)
	if got := decodeExpanded(t, body); !bytes.Equal(got.Transaction, creation(t, 50)) || got.TransactionZstd != nil {
		t.Fatal("a compressed transaction does not expand to its bytes")
	}
}
