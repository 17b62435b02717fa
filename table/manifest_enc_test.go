package table

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// checkEncoding checks that m.AppendEncoding writes exactly what a
// deterministic Marshal of m.Proto() writes, after a prefix it keeps.
func checkEncoding(t *testing.T, what string, m *Manifest) {
	t.Helper()
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m.Proto())
	if err != nil {
		t.Fatal(err)
	}
	prefix := []byte("prefix")
	got, err := m.AppendEncoding(bytes.Clone(prefix))
	if err != nil {
		t.Fatalf("%s: AppendEncoding: %v", what, err)
	}
	if !bytes.HasPrefix(got, prefix) || !bytes.Equal(got[len(prefix):], want) {
		back := &lancepb.Manifest{}
		err := proto.Unmarshal(got[len(prefix):], back)
		t.Fatalf("%s: AppendEncoding differs from Marshal(Proto()) (decodes equal: %v, %v)", what, err == nil && proto.Equal(back, m.Proto()), err)
	}
}

// AppendEncoding is the deterministic encoding of Proto, for manifests
// whose fragments hold their own encoding (from messages, from staged
// bytes through a Decoder, with deletion files and row ids) and for one
// kept decoded, with unknown fields in the header.
func TestAppendEncodingMatchesMarshal(t *testing.T) {
	checkEncoding(t, "empty", btManifest(t))
	r := rand.New(rand.NewPCG(3, 4))
	head := stagedAppends(t, btManifest(t, 1, 2, 3), 200, func(i int) *lancepb.DataFragment {
		return &lancepb.DataFragment{PhysicalRows: uint64(1 + r.IntN(100)), Files: []*lancepb.DataFile{{Path: fmt.Sprintf("data/%d.lance", i), Fields: []int32{0}}}}
	})
	checkEncoding(t, "200 staged appends", head)

	pb := head.Proto()
	pb.Fragments = append(pb.Fragments, &lancepb.DataFragment{Id: 9999, PhysicalRows: 10,
		Files:         []*lancepb.DataFile{{Path: "data/d.lance", Fields: []int32{0}}},
		DeletionFile:  &lancepb.DeletionFile{FileType: lancepb.DeletionFile_BITMAP, ReadVersion: 3, Id: 7, NumDeletedRows: 2},
		RowIdSequence: &lancepb.DataFragment_InlineRowIds{InlineRowIds: []byte{1, 2, 3}}})
	pb.ProtoReflect().SetUnknown([]byte{0xf8, 0x07, 0x01}) // field 127, varint 1
	m, err := FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	checkEncoding(t, "deletions, row ids, unknown header field", m)

	kept := m.Edit()
	if err := kept.Append(&Fragment{id: 10000, rows: 1, pb: &lancepb.DataFragment{Id: 10000, PhysicalRows: 1}}); err != nil {
		t.Fatal(err)
	}
	checkEncoding(t, "a fragment kept decoded", kept.Build())
}

// stagedAppends applies n Appends to head as the committer does: each
// staged as bytes, decoded and applied by one Decoder, frag(i) the i-th
// one's fragment.
func stagedAppends(tb testing.TB, head *Manifest, n int, frag func(i int) *lancepb.DataFragment) *Manifest {
	tb.Helper()
	var d Decoder
	for i := range n {
		txn := &lancepb.Transaction{ReadVersion: head.Version(), Uuid: fmt.Sprintf("0a0b0c0d-0000-4000-8000-%012d", i),
			Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{Fragments: []*lancepb.DataFragment{frag(i)}}}}
		b, err := proto.Marshal(txn)
		if err != nil {
			tb.Fatal(err)
		}
		decoded, _, _, err := d.Decode(b)
		if err != nil {
			tb.Fatal(err)
		}
		if head, err = d.Apply(tb.Context(), head, decoded, nil); err != nil {
			tb.Fatal(err)
		}
	}
	return head
}
