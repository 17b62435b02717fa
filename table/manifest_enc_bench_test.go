package table

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// BenchmarkManifestEncoding encodes a manifest of 20,000 appended
// fragments (a checkpoint's manifest): AppendEncoding against a
// deterministic Marshal of Proto, which the checkpoint writer used before.
func BenchmarkManifestEncoding(b *testing.B) {
	var d Decoder
	head := btManifest(b)
	for i := range 20000 {
		txn := &lancepb.Transaction{ReadVersion: head.Version(), Uuid: fmt.Sprintf("0a0b0c0d-0000-4000-8000-%012d", i),
			Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{Fragments: []*lancepb.DataFragment{{
				PhysicalRows: 1000, Files: []*lancepb.DataFile{{Path: fmt.Sprintf("data/%d.lance", i), Fields: []int32{0}, ColumnIndices: []int32{0}, FileMajorVersion: 2, FileMinorVersion: 1}},
			}}}}}
		raw, err := proto.Marshal(txn)
		if err != nil {
			b.Fatal(err)
		}
		decoded, _, _, err := d.Decode(raw)
		if err != nil {
			b.Fatal(err)
		}
		if head, err = d.Apply(b.Context(), head, decoded, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("AppendEncoding", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			var err error
			if buf, err = head.AppendEncoding(buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(len(buf)))
	})
	b.Run("MarshalProto", func(b *testing.B) {
		b.ReportAllocs()
		var n int
		for b.Loop() {
			out, err := proto.MarshalOptions{Deterministic: true}.Marshal(head.Proto())
			if err != nil {
				b.Fatal(err)
			}
			n = len(out)
		}
		b.SetBytes(int64(n))
	})
}
