package table

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// checkRawFragment checks what a Decoder noted of the body it last
// decoded into its block: if it kept the fragment's bytes, they are the
// fragment encodePlainFragment writes with id 0, and with any id the
// Fragment made from them is the one encoded from the message.
func checkRawFragment(t *testing.T, d *Decoder) {
	t.Helper()
	if d.raw == nil {
		return
	}
	frags := d.block.txn.GetAppend().GetFragments()
	if len(frags) != 1 || !plainFragment(frags[0]) || frags[0].GetId() != 0 {
		t.Fatalf("kept the staged bytes %x of %v", d.raw, frags)
	}
	f := frags[0]
	for _, id := range []uint64{0, 1, 300, 1 << 40} {
		got, want := newRawFragment(d.raw, id, f.GetPhysicalRows()), newPlainFragment(f, id)
		same := got.id == want.id && got.rows == want.rows && got.deleted == want.deleted && got.has == want.has && got.pb == nil && want.pb == nil
		if !same || !bytes.Equal(got.enc, want.enc) {
			t.Fatalf("id %d: the staged bytes make %x, encoding makes %x", id, got.enc, want.enc)
		}
	}
}

// TestRawFragmentMatchesEncode decodes plain one-fragment Appends with a
// Decoder: marshalled by proto, their fragment's bytes are kept and make
// the same Fragment as encoding; altered to encodings proto does not
// write (a zero field, a field out of order, a long varint, an int32
// written in five bytes, an id), they are not kept.
func TestRawFragmentMatchesEncode(t *testing.T) {
	var d Decoder
	r := rand.New(rand.NewPCG(13, 14))
	for i := range 500 {
		df := &lancepb.DataFile{Path: fmt.Sprintf("data/%d.lance", r.Uint32()), FileMajorVersion: uint32(r.IntN(3)),
			FileMinorVersion: uint32(r.IntN(3)), FileSizeBytes: uint64(r.IntN(1 << 30))}
		for range r.IntN(5) { // with the column indices, at most the block's 8 ints
			df.Fields = append(df.Fields, int32(r.IntN(40))-2)
		}
		if r.IntN(2) == 0 {
			df.ColumnIndices = slices.Clone(df.Fields)
		}
		frag := &lancepb.DataFragment{PhysicalRows: uint64(1 + r.IntN(1<<20)), Files: []*lancepb.DataFile{df}}
		txn := &lancepb.Transaction{ReadVersion: uint64(i + 1), Uuid: fmt.Sprintf("0a0b0c0d-0000-4000-8000-%012d", i),
			Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{Fragments: []*lancepb.DataFragment{frag}}}}
		b, err := proto.Marshal(txn)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, reused, err := d.Decode(b); err != nil || !reused || d.raw == nil {
			t.Fatalf("append %d: reused %v, kept %x, %v", i, reused, d.raw, err)
		}
		checkRawFragment(t, &d)
	}

	fb, err := proto.Marshal(&lancepb.DataFragment{PhysicalRows: 7, Files: []*lancepb.DataFile{{Path: "a", Fields: []int32{1}}}})
	if err != nil {
		t.Fatal(err)
	}
	file := appendField(nil, filePath, []byte("a"))
	altered := map[string][]byte{
		"zero major version": varintField(appendField(nil, fragFiles, varintField(slices.Clone(file), fileMajor, 0)), fragPhysicalRows, 7),
		"rows before files":  appendField(varintField(nil, fragPhysicalRows, 7), fragFiles, file),
		"long varint":        append(appendField(nil, fragFiles, file), byte(fragPhysicalRows<<3), 0x87, 0x00),
		"int32 in 5 bytes":   varintField(appendField(nil, fragFiles, appendField(slices.Clone(file), fileFields, []byte{0xff, 0xff, 0xff, 0xff, 0x0f})), fragPhysicalRows, 7),
		"with an id":         append(varintField(nil, fragID, 3), fb...),
		"no rows":            appendField(nil, fragFiles, file),
		"long tag":           append(append(appendField(nil, fragFiles, file), byte(fragPhysicalRows<<3)|0x80, 0x00), 7),
		"long file tag":      varintField(appendField(nil, fragFiles, append([]byte{byte(filePath<<3|2) | 0x80, 0x00, 1}, 'a')), fragPhysicalRows, 7),
		"long length":        varintField(append([]byte{byte(fragFiles<<3 | 2), 0x83, 0x00}, file...), fragPhysicalRows, 7),
		"long path length":   varintField(appendField(nil, fragFiles, []byte{byte(filePath<<3 | 2), 0x81, 0x00, 'a'}), fragPhysicalRows, 7),
		"empty path":         varintField(appendField(nil, fragFiles, appendField(nil, filePath, nil)), fragPhysicalRows, 7),
		"fields before path": varintField(appendField(nil, fragFiles, append(appendField(nil, fileFields, []byte{1}), file...)), fragPhysicalRows, 7),
		"zero size":          varintField(appendField(nil, fragFiles, varintField(slices.Clone(file), fileSizeBytes, 0)), fragPhysicalRows, 7),
		"major above 2^32":   varintField(appendField(nil, fragFiles, varintField(slices.Clone(file), fileMajor, 1<<32)), fragPhysicalRows, 7),
		"rows twice":         varintField(varintField(appendField(nil, fragFiles, file), fragPhysicalRows, 7), fragPhysicalRows, 8),
	}
	for name, frag := range altered {
		b := appendField(appendField(nil, txnUUID, []byte("0a0b0c0d-0000-4000-8000-000000000001")), txnAppend, appendField(nil, appendFragments, frag))
		_, _, reused, err := d.Decode(b)
		if name == "rows twice" { // the decoder declines it: a field given twice
			if reused {
				t.Errorf("%s: decoded into the block", name)
			}
			continue
		}
		if err != nil || !reused || d.raw != nil {
			t.Errorf("%s: reused %v, kept %x, %v; want the block, the bytes not kept", name, reused, d.raw, err)
		}
		checkRawFragment(t, &d)
		checkDecodeAppend(t, b)
	}
	// Canonical after all: a data file with every field.
	full := varintField(varintField(varintField(appendField(appendField(slices.Clone(file), fileFields, []byte{1, 2}), fileColumns, []byte{0, 1}), fileMajor, 2), fileMinor, 1), fileSizeBytes, 99)
	frag := varintField(appendField(nil, fragFiles, full), fragPhysicalRows, 7)
	b := appendField(appendField(nil, txnUUID, []byte("0a0b0c0d-0000-4000-8000-000000000001")), txnAppend, appendField(nil, appendFragments, frag))
	if _, _, reused, err := d.Decode(b); err != nil || !reused || !slices.Equal(d.raw, frag) {
		t.Errorf("a full file: reused %v, kept %x, %v; want the bytes kept", reused, d.raw, err)
	}
	checkRawFragment(t, &d)
	checkDecodeAppend(t, b)
}

// TestDecoderApplyMatchesApply applies plain one-fragment Appends to a
// table, each through Decoder.Apply (the staged bytes) and through Apply
// (encoding), and compares the versions fragment for fragment, byte for
// byte, and header for header.
func TestDecoderApplyMatchesApply(t *testing.T) {
	var d Decoder
	r := rand.New(rand.NewPCG(15, 16))
	head := btManifest(t)
	for i := range 300 {
		txn := &lancepb.Transaction{ReadVersion: head.Version(), Uuid: fmt.Sprintf("0a0b0c0d-0000-4000-8000-%012d", i), Tag: fmt.Sprint(r.IntN(2)),
			Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{Fragments: []*lancepb.DataFragment{{
				PhysicalRows: uint64(1 + r.IntN(100)), Files: []*lancepb.DataFile{{Path: fmt.Sprintf("data/%d.lance", i), Fields: []int32{0}}},
			}}}}}
		b, err := proto.Marshal(txn)
		if err != nil {
			t.Fatal(err)
		}
		decoded, _, reused, err := d.Decode(b)
		if err != nil || !reused || d.raw == nil {
			t.Fatalf("append %d: reused %v, kept %x, %v", i, reused, d.raw, err)
		}
		got, err := d.Apply(t.Context(), head, decoded, nil)
		if err != nil {
			t.Fatal(err)
		}
		want, err := Apply(t.Context(), head, txn, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got.Header(), want.Header()) || !slices.EqualFunc(slices.Collect(got.Fragments()), slices.Collect(want.Fragments()),
			func(a, b *Fragment) bool { return a.id == b.id && a.rows == b.rows && bytes.Equal(a.enc, b.enc) }) {
			t.Fatalf("append %d: Decoder.Apply made\n%v\nApply made\n%v", i, got.Proto(), want.Proto())
		}
		head = got
	}
}

func appendField(b []byte, num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

// varintField appends a varint field, zero included.
func varintField(b []byte, num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}
