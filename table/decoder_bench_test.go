package table

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// BenchmarkDecodeAppend decodes a staged Append with 0, 1 and 16
// protected fragments, through DecodeTransaction (new messages each
// time) and through one Decoder (its block reused where the Append fits).
func BenchmarkDecodeAppend(b *testing.B) {
	for _, pre := range []int{0, 1, 16} {
		txn := &lancepb.Transaction{ReadVersion: 7, Uuid: "0a0b0c0d-0000-4000-8000-000000000001",
			Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{Fragments: []*lancepb.DataFragment{{
				PhysicalRows: 10, Files: []*lancepb.DataFile{{Path: "data/a.lance", Fields: []int32{0, 1}, ColumnIndices: []int32{0, 1}}},
			}}}},
		}
		if pre > 0 {
			cells := &lancepb.CellsUnchanged{FieldIds: []int32{1}}
			for f := range pre {
				cells.Rows = append(cells.Rows, &lancepb.FragmentRows{FragmentId: uint64(f), Selection: &lancepb.FragmentRows_WholeFragment{WholeFragment: true}})
			}
			txn.Preconditions = []*lancepb.Precondition{{Kind: &lancepb.Precondition_CellsUnchanged{CellsUnchanged: cells}}}
		}
		body, err := proto.Marshal(txn)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("pre=%d/DecodeTransaction", pre), func(b *testing.B) {
			for b.Loop() {
				if _, _, err := DecodeTransaction(body); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("pre=%d/Decoder", pre), func(b *testing.B) {
			var d Decoder
			for b.Loop() {
				if _, _, _, err := d.Decode(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
