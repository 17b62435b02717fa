package publish

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// BenchmarkPublishVersion measures what publishing one version costs
// beside the committer: building the manifest file of a table with
// `frags` fragments (the manifest is rewritten whole every version, as in
// Lance; the table model's Apply is included), and writing the transaction file, the manifest (put-if-absent)
// and the version hint to a local directory.
func BenchmarkPublishVersion(b *testing.B) {
	for _, frags := range []int{10, 1000} {
		b.Run(fmt.Sprintf("fragments=%d", frags), func(b *testing.B) {
			ctx := context.Background()
			loc, err := OpenLocation(ctx, filepath.Join(b.TempDir(), "t.lance"), true)
			if err != nil {
				b.Fatal(err)
			}
			defer loc.Close()
			p := &Publisher{ds: "t", cfg: nil, loc: loc, now: time.Now}
			p.logger = discardLogger()
			m, txn := benchTable(b, frags)
			b.ResetTimer()
			var bytes int
			for i := range b.N {
				next, err := table.Apply(ctx, m, &lancepb.Transaction{ReadVersion: m.Version(), Uuid: fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
					Operation: txn.Operation}, nil)
				if err != nil {
					b.Fatal(err)
				}
				f, err := ManifestFile(next, &lancepb.Transaction{ReadVersion: m.Version(), Uuid: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), Operation: txn.Operation}, "", time.Now())
				if err != nil {
					b.Fatal(err)
				}
				enc, err := encode(f)
				if err != nil {
					b.Fatal(err)
				}
				bytes = len(enc)
				if err := p.Publish(ctx, next, f.Transaction); err != nil {
					b.Fatal(err)
				}
				m = next
			}
			b.ReportMetric(float64(bytes), "manifest-bytes")
		})
	}
}

// benchTable is a table of n one-file fragments, and an Overwrite with
// the same fragments: applied again and again it makes versions of a
// constant size.
func benchTable(b *testing.B, n int) (*table.Manifest, *lancepb.Transaction) {
	b.Helper()
	fields := []*lancepb.Field{{Name: "id", Id: 0, ParentId: -1, LogicalType: "int64"}, {Name: "x", Id: 1, ParentId: -1, LogicalType: "double"}}
	frag := func(i int) *lancepb.DataFragment {
		return &lancepb.DataFragment{PhysicalRows: 1 << 20, Files: []*lancepb.DataFile{{
			Path: fmt.Sprintf("%032x.lance", i), Fields: []int32{0, 1}, ColumnIndices: []int32{0, 1},
			FileMajorVersion: 2, FileMinorVersion: 1, FileSizeBytes: 16 << 20,
		}}}
	}
	var frags []*lancepb.DataFragment
	for i := range n {
		frags = append(frags, frag(i))
	}
	overwrite := &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{Schema: fields, Fragments: frags}}
	m, err := table.Apply(context.Background(), nil, &lancepb.Transaction{Uuid: "11111111-0000-4000-8000-000000000000", Operation: overwrite}, nil)
	if err != nil {
		b.Fatal(err)
	}
	return m, &lancepb.Transaction{Operation: overwrite}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// BenchmarkManifestFile measures the CPU part of publishing alone:
// building and encoding the manifest file of a table of n fragments.
func BenchmarkManifestFile(b *testing.B) {
	for _, frags := range []int{10, 1000, 100000} {
		b.Run(fmt.Sprintf("fragments=%d", frags), func(b *testing.B) {
			m, _ := benchTable(b, frags)
			txn := &lancepb.Transaction{Uuid: "11111111-0000-4000-8000-000000000000"}
			var n int
			for b.Loop() {
				f, err := ManifestFile(m, txn, "", time.Now())
				if err != nil {
					b.Fatal(err)
				}
				enc, err := encode(f)
				if err != nil {
					b.Fatal(err)
				}
				n = len(enc)
			}
			b.ReportMetric(float64(n), "manifest-bytes")
		})
	}
}
