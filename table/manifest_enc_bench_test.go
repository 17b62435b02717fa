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
	head := stagedAppends(b, btManifest(b), 20000, func(i int) *lancepb.DataFragment {
		return &lancepb.DataFragment{PhysicalRows: 1000, Files: []*lancepb.DataFile{{
			Path: fmt.Sprintf("data/%d.lance", i), Fields: []int32{0}, ColumnIndices: []int32{0}, FileMajorVersion: 2, FileMinorVersion: 1,
		}}}
	})
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
