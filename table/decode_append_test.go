package table

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// reusing is the Decoder checkDecodeAppend decodes every body with
// too, one after the other: each decode into its block follows another's.
var reusing Decoder

// checkDecodeAppend checks the fast path on b against the general
// decoder: if it accepts b, the general decoder decodes b without error to
// an equal Append or Overwrite transaction, the operation the fast path
// names, and every slice it hands out has its length as capacity. A Decoder whose block earlier bodies were decoded into
// decodes b to the same (checkReusedDecode). It reports whether the fast
// path accepted b.
func checkDecodeAppend(t *testing.T, b []byte) bool {
	t.Helper()
	got, gotOp, _, ok := decodeAppend(b, nil)
	checkReusedDecode(t, b, got, ok)
	if !ok {
		return false
	}
	want := &lancepb.Transaction{}
	if err := proto.Unmarshal(b, want); err != nil {
		t.Fatalf("fast path accepted %x, which does not decode: %v", b, err)
	}
	if op, err := OpOf(want); err != nil || op != gotOp || op != OpAppend && op != OpOverwrite {
		t.Fatalf("fast path accepted %x as %v, a %v (%v)", b, gotOp, op, err)
	}
	if !proto.Equal(got, want) {
		t.Fatalf("fast path decoded %x to\n%v\nwant\n%v", b, got, want)
	}
	gb, err1 := proto.MarshalOptions{Deterministic: true}.Marshal(got)
	wb, err2 := proto.MarshalOptions{Deterministic: true}.Marshal(want)
	if err1 != nil || err2 != nil || !slices.Equal(gb, wb) {
		t.Fatalf("re-encodings differ (%v, %v)", err1, err2)
	}
	if pre := got.GetPreconditions(); cap(pre) != len(pre) {
		t.Fatalf("preconditions: len %d cap %d", len(pre), cap(pre))
	}
	for _, p := range got.GetPreconditions() {
		c := p.GetCellsUnchanged()
		if cap(c.GetRows()) != len(c.GetRows()) || cap(c.GetFieldIds()) != len(c.GetFieldIds()) {
			t.Fatalf("precondition rows or field ids with spare capacity")
		}
	}
	frags := got.GetAppend().GetFragments()
	if gotOp == OpOverwrite {
		frags = got.GetOverwrite().GetFragments()
		if schema := got.GetOverwrite().GetSchema(); cap(schema) != len(schema) {
			t.Fatalf("schema: len %d cap %d", len(schema), cap(schema))
		}
	}
	if cap(frags) != len(frags) {
		t.Fatalf("fragments: len %d cap %d", len(frags), cap(frags))
	}
	for _, f := range frags {
		if cap(f.Files) != len(f.Files) {
			t.Fatalf("files: len %d cap %d", len(f.Files), cap(f.Files))
		}
		for _, df := range f.Files {
			if cap(df.Fields) != len(df.Fields) || cap(df.ColumnIndices) != len(df.ColumnIndices) {
				t.Fatalf("file %s: fields or column indices with spare capacity", df.Path)
			}
		}
	}
	return true
}

// checkReusedDecode checks that a Decoder, its block dirty with the
// previous body, decodes b as DecodeTransaction does: fresh is what the
// fast path decoded b to (ok: it accepted b).
func checkReusedDecode(t *testing.T, b []byte, fresh *lancepb.Transaction, ok bool) {
	t.Helper()
	txn, op, reused, err := reusing.Decode(b)
	wtxn, wop, werr := DecodeTransaction(b)
	if op != wop || (err == nil) != (werr == nil) || !proto.Equal(txn, wtxn) {
		t.Fatalf("Decoder decoded %x to %v, %v, %v; DecodeTransaction to %v, %v, %v", b, txn, op, err, wtxn, wop, werr)
	}
	if ok && !proto.Equal(txn, fresh) {
		t.Fatalf("Decoder decoded %x to\n%v\nthe fast path to\n%v", b, txn, fresh)
	}
	if reused && (!ok || txn != &reusing.block.txn) {
		t.Fatalf("Decoder says %x is in its block: accepted by the fast path %v, in the block %v", b, ok, txn == &reusing.block.txn)
	}
	if reusing.raw != nil && !reused {
		t.Fatalf("Decoder kept the staged bytes of %x, not in its block", b)
	}
	checkRawFragment(t, &reusing)
	if reusing.body != nil && !ok {
		t.Fatalf("Decoder knows the read version of %x, which the fast path declines", b)
	}
	checkLand(t, &reusing, b)
	if reused && len(txn.GetAppend().GetFragments()) == 1 {
		frag := firstFragment(b)
		if got, want := reusing.raw != nil, canonicalFragment(frag); got != want || got && !slices.Equal(reusing.raw, frag) {
			t.Fatalf("Decoder kept the staged fragment %x: %v; canonicalFragment says %v", frag, got, want)
		}
	}
}

// firstFragment returns the encoding of the first fragment of b, an
// encoded Append (nil if there is none), found field by field.
func firstFragment(b []byte) []byte {
	return firstField(firstField(b, txnAppend), appendFragments)
}

// firstField returns the bytes of the first length-delimited field num
// of message b, nil if there is none or b does not parse.
func firstField(b []byte, num protowire.Number) []byte {
	for len(b) > 0 {
		n, typ, tn := protowire.ConsumeTag(b)
		if tn < 0 {
			return nil
		}
		m := protowire.ConsumeFieldValue(n, typ, b[tn:])
		if m < 0 {
			return nil
		}
		if n == num && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b[tn:])
			return v
		}
		b = b[tn+m:]
	}
	return nil
}

// checkLand checks d.Land against Land on b, the body d decoded last,
// for a few read versions: the same length, encoding and error.
func checkLand(t *testing.T, d *Decoder, b []byte) {
	t.Helper()
	for _, rv := range []uint64{0, 1, 300, 1 << 40} {
		got, gerr := d.Land(b, rv)
		want, werr := Land(b, rv)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("Decoder.Land(%x, %d): error %v, Land: %v", b, rv, gerr, werr)
		}
		if gerr != nil {
			continue
		}
		gb, wb := got.AppendTo([]byte{7}), want.AppendTo([]byte{7})
		if got.Len() != want.Len() || !slices.Equal(gb, wb) || len(gb) != 1+got.Len() {
			t.Fatalf("Decoder.Land(%x, %d) = %d bytes %x, Land %d bytes %x", b, rv, got.Len(), gb, want.Len(), wb)
		}
	}
}

// TestDecoderLandMatchesLand lands Appends the Decoder knows with their
// read_version field first (as proto writes it), in the middle, last,
// absent, and with an overlong tag or value, and checks each against
// Land; also a body other than the one decoded last.
func TestDecoderLandMatchesLand(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	overlongTag := []byte{0x88, 0x80, 0x00, 0x05} // field 1, varint, in three bytes; 5
	overlongVal := []byte{0x08, 0x85, 0x80, 0x00} // 5 in three bytes
	for range 300 {
		txn := randomAppend(r, false)
		txn.ReadVersion = 0
		body, err := proto.Marshal(txn) // every field but read_version
		if err != nil {
			t.Fatal(err)
		}
		rv := protowire.AppendVarint(protowire.AppendTag(nil, txnReadVersion, protowire.VarintType), r.Uint64()>>r.IntN(64))
		var fields [][]byte
		for rest := body; len(rest) > 0; {
			_, _, n := protowire.ConsumeField(rest)
			fields, rest = append(fields, rest[:n]), rest[n:]
		}
		for _, f := range [][]byte{rv, overlongTag, overlongVal, nil} {
			for at := range len(fields) + 1 {
				b := slices.Concat(slices.Concat(fields[:at]...), f, slices.Concat(fields[at:]...))
				if !checkDecodeAppend(t, b) {
					t.Fatalf("fast path declined %x", b)
				}
				if reusing.body == nil {
					t.Fatalf("Decoder does not know where the read version of %x is", b)
				}
				checkLand(t, &reusing, slices.Clone(b)) // equal bytes, another body: the walk
			}
		}
	}
	var none *Decoder
	checkLand(t, none, []byte{0x08, 0x01})
}

// randomAppend returns a random Append; with extras, it may carry parts
// the fast path declines (they must then take the general path).
func randomAppend(r *rand.Rand, extras bool) *lancepb.Transaction {
	app := &lancepb.Transaction_Append{}
	for range 1 + r.IntN(3) {
		f := &lancepb.DataFragment{Id: uint64(r.IntN(3)), PhysicalRows: uint64(r.IntN(1 << 20))}
		for range r.IntN(3) {
			df := &lancepb.DataFile{Path: fmt.Sprintf("data/%d.lance", r.Uint32()),
				FileMajorVersion: uint32(r.IntN(3)), FileMinorVersion: uint32(r.IntN(3)), FileSizeBytes: uint64(r.IntN(1 << 30))}
			for range r.IntN(12) {
				df.Fields = append(df.Fields, int32(r.IntN(40))-2) // -2: a tombstone
				df.ColumnIndices = append(df.ColumnIndices, int32(r.IntN(40))-1)
			}
			if extras && r.IntN(8) == 0 {
				df.BaseId = proto.Uint32(1)
			}
			f.Files = append(f.Files, df)
		}
		if extras && r.IntN(8) == 0 {
			f.DeletionFile = &lancepb.DeletionFile{Id: 1, NumDeletedRows: 1}
		}
		app.Fragments = append(app.Fragments, f)
	}
	txn := &lancepb.Transaction{ReadVersion: uint64(r.IntN(100)), Uuid: fmt.Sprintf("%08x-0000-4000-8000-%012x", r.Uint32(), r.Uint64()&(1<<48-1)),
		Operation: &lancepb.Transaction_Append_{Append: app}}
	if r.IntN(4) == 0 {
		txn.Tag = "tag"
	}
	if r.IntN(2) == 0 {
		txn.Preconditions = randomPreconditions(r, extras)
	}
	if extras && r.IntN(8) == 0 {
		txn.TransactionProperties = map[string]string{"k": "v"}
	}
	return txn
}

// randomOverwrite returns a random Overwrite, a dataset's creation when
// its read version is 0: randomAppend's fragments and a schema; with
// extras, it may carry parts the fast path declines.
func randomOverwrite(r *rand.Rand, extras bool) *lancepb.Transaction {
	txn := randomAppend(r, extras)
	ow := &lancepb.Transaction_Overwrite{Fragments: txn.GetAppend().GetFragments()}
	if r.IntN(8) == 0 {
		ow.Fragments = nil // an empty table
	}
	for i := range r.IntN(4) {
		f := &lancepb.Field{Id: int32(i), ParentId: -1, Name: fmt.Sprintf("c%d", i), LogicalType: "int64", Nullable: r.IntN(2) == 0}
		if r.IntN(4) == 0 {
			f.Metadata = map[string][]byte{"m": {byte(i)}}
		}
		ow.Schema = append(ow.Schema, f)
	}
	if extras && r.IntN(4) == 0 {
		ow.SchemaMetadata = map[string][]byte{"k": []byte("v")}
	}
	if extras && r.IntN(4) == 0 {
		ow.ConfigUpsertValues = map[string]string{"k": "v"}
	}
	txn.Operation = &lancepb.Transaction_Overwrite_{Overwrite: ow}
	if r.IntN(2) == 0 {
		txn.ReadVersion = 0
	}
	return txn
}

// randomPreconditions returns cell preconditions on whole fragments and
// offset bitmaps; with extras, some with parts the fast path declines (an
// empty bitmap, no kind).
func randomPreconditions(r *rand.Rand, extras bool) []*lancepb.Precondition {
	var out []*lancepb.Precondition
	for range 1 + r.IntN(3) {
		c := &lancepb.CellsUnchanged{}
		for range r.IntN(4) {
			c.FieldIds = append(c.FieldIds, int32(r.IntN(9))-1)
		}
		for range r.IntN(4) {
			fr := &lancepb.FragmentRows{FragmentId: uint64(r.IntN(5))}
			switch r.IntN(3) {
			case 0:
				fr.Selection = &lancepb.FragmentRows_WholeFragment{WholeFragment: r.IntN(4) > 0}
			case 1:
				bm := []byte{byte(r.IntN(256)), 1, 2}
				if extras && r.IntN(4) == 0 {
					bm = []byte{}
				}
				fr.Selection = &lancepb.FragmentRows_OffsetBitmap{OffsetBitmap: bm}
			}
			c.Rows = append(c.Rows, fr)
		}
		if r.IntN(4) == 0 {
			c.RowAddrTreeMap = []byte{9, 8, byte(r.IntN(256))}
		}
		p := &lancepb.Precondition{Kind: &lancepb.Precondition_CellsUnchanged{CellsUnchanged: c}}
		if extras && r.IntN(8) == 0 {
			p.Kind = nil
		}
		out = append(out, p)
	}
	return out
}

// mutate changes b the way a careless or hostile producer might: a byte
// changed, the end cut off, a field repeated, an unknown field added.
func mutate(r *rand.Rand, b []byte) []byte {
	b = slices.Clone(b)
	switch r.IntN(5) {
	case 0:
		if len(b) > 0 {
			b[r.IntN(len(b))] ^= byte(1 << r.IntN(8))
		}
	case 1:
		b = b[:r.IntN(len(b)+1)]
	case 2: // read_version again
		b = protowire.AppendVarint(protowire.AppendTag(b, txnReadVersion, protowire.VarintType), 7)
	case 3: // an unknown field
		b = protowire.AppendVarint(protowire.AppendTag(b, 99, protowire.VarintType), 1)
	case 4: // a string that is not UTF-8
		b = protowire.AppendBytes(protowire.AppendTag(b, txnTag, protowire.BytesType), []byte{0xff, 0xfe})
	}
	return b
}

// TestDecodeAppendMatchesProto decodes generated Append and Overwrite
// bodies, plain and with parts the fast path declines, intact and
// mutated, and checks every body the fast path accepts against the
// general decoder (and that it does accept the plain ones).
func TestDecodeAppendMatchesProto(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	accepted := 0
	for i := range 3000 {
		plain := i%2 == 0
		txn := randomAppend(r, !plain)
		if i%4 >= 2 {
			txn = randomOverwrite(r, !plain)
		}
		b, err := proto.Marshal(txn)
		if err != nil {
			t.Fatal(err)
		}
		ok := checkDecodeAppend(t, b)
		if plain && !ok {
			t.Fatalf("fast path declined a plain append: %v", txn)
		}
		if ok {
			accepted++
		}
		checkDecodeAppend(t, mutate(r, b))
	}
	if accepted < 1500 {
		t.Fatalf("fast path accepted %d bodies, want at least the 1500 plain ones", accepted)
	}
}

// TestDecodeAppendDeclines lists bodies the fast path must leave to the
// general decoder, because it would otherwise decode them differently or
// accept what the general decoder refuses.
func TestDecodeAppendDeclines(t *testing.T) {
	plain, err := proto.Marshal(randomAppend(rand.New(rand.NewPCG(3, 4)), false))
	if err != nil {
		t.Fatal(err)
	}
	unpacked := protowire.AppendVarint(protowire.AppendTag(nil, fileFields, protowire.VarintType), 3)
	frag := appendField(nil, fragFiles, unpacked)
	cases := map[string][]byte{
		"empty body":                     nil,
		"no fragments":                   appendField(nil, txnAppend, nil),
		"append given twice":             appendField(plain, txnAppend, appendField(nil, appendFragments, nil)),
		"unknown field":                  protowire.AppendVarint(protowire.AppendTag(slices.Clone(plain), 99, protowire.VarintType), 1),
		"uuid twice":                     appendField(appendField(slices.Clone(plain), txnUUID, []byte("a")), txnUUID, []byte("b")),
		"uuid not UTF-8":                 appendField(slices.Clone(plain), txnUUID, []byte{0xff}),
		"unpacked fields":                appendField(nil, txnAppend, appendField(nil, appendFragments, frag)),
		"delete":                         appendField(nil, 101, nil),
		"append and overwrite":           appendField(slices.Clone(plain), txnOverwrite, nil),
		"overwrite with schema metadata": appendField(nil, txnOverwrite, appendField(nil, 3, appendField(nil, 1, []byte("k")))),
		"overwrite with a schema field not UTF-8": appendField(nil, txnOverwrite, appendField(nil, overwriteSchema, appendField(nil, 2, []byte{0xff}))),
		"read version fixed":                      protowire.AppendFixed64(protowire.AppendTag(nil, txnReadVersion, protowire.Fixed64Type), 1),
		"truncated":                               plain[:len(plain)-1],
		"overlong varint tag":                     {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	}
	for name, b := range cases {
		if _, _, _, ok := decodeAppend(b, nil); ok {
			t.Errorf("%s: fast path accepted %x", name, b)
		}
		checkReusedDecode(t, b, nil, false)
	}
	if _, _, _, ok := decodeAppend(plain, nil); !ok {
		t.Fatal("fast path declined the plain append the cases are built from")
	}
}

// FuzzDecodeAppend checks the fast path against the general decoder on
// arbitrary bodies.
//
//	go test ./table -run '^$' -fuzz FuzzDecodeAppend -fuzztime 60s
func FuzzDecodeAppend(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 8 {
		txn := randomAppend(r, false)
		if i%2 == 1 {
			txn = randomOverwrite(r, false)
		}
		b, err := proto.Marshal(txn)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecodeAppend(t, b)
	})
}

// TestDecodeGuardedAppendInOneBlock decodes the usual guarded Append (one
// fragment, one data file, one precondition on one fragment) and checks it
// against the general decoder, and that it takes two allocations: the
// body's string copy and one block for every message.
func TestDecodeGuardedAppendInOneBlock(t *testing.T) {
	txn := &lancepb.Transaction{ReadVersion: 7, Uuid: "0a0b0c0d-0000-4000-8000-000000000001",
		Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{Fragments: []*lancepb.DataFragment{{
			Id: 3, PhysicalRows: 10, Files: []*lancepb.DataFile{{Path: "data/a.lance", Fields: []int32{0, 1}, ColumnIndices: []int32{0, 1}}},
		}}}},
		Preconditions: []*lancepb.Precondition{{Kind: &lancepb.Precondition_CellsUnchanged{CellsUnchanged: &lancepb.CellsUnchanged{
			FieldIds: []int32{1},
			Rows:     []*lancepb.FragmentRows{{FragmentId: 0, Selection: &lancepb.FragmentRows_WholeFragment{WholeFragment: true}}},
		}}}},
	}
	b, err := proto.Marshal(txn)
	if err != nil {
		t.Fatal(err)
	}
	if !checkDecodeAppend(t, b) {
		t.Fatal("fast path declined a guarded append")
	}
	if n := testing.AllocsPerRun(100, func() { decodeAppend(b, nil) }); n != 2 {
		t.Errorf("decoding a guarded append takes %v allocations, want 2", n)
	}
	var d Decoder
	got, _, reused, err := d.Decode(b)
	if err != nil || !reused || got != &d.block.txn || !proto.Equal(got, txn) {
		t.Fatalf("Decoder: %v, reused %v, %v; want %v in its block", got, reused, err, txn)
	}
	if n := testing.AllocsPerRun(100, func() { d.Decode(b) }); n != 0 {
		t.Errorf("decoding a guarded append into a Decoder's block takes %v allocations, want none", n)
	}
}

// TestDecoderReusesItsBlock decodes the usual Append (one fragment, one
// data file, no precondition) with a Decoder, again and again: each is
// decoded into the Decoder's block without an allocation, each equal to what DecodeTransaction makes of it, and an
// Append that does not fit the block is decoded apart.
func TestDecoderReusesItsBlock(t *testing.T) {
	var d Decoder
	r := rand.New(rand.NewPCG(9, 10))
	for i := range 200 {
		txn := &lancepb.Transaction{ReadVersion: uint64(i + 1), Uuid: fmt.Sprintf("0a0b0c0d-0000-4000-8000-%012d", i), Tag: fmt.Sprint(r.IntN(2)),
			Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{Fragments: []*lancepb.DataFragment{{
				PhysicalRows: uint64(1 + r.IntN(100)), Files: []*lancepb.DataFile{{Path: fmt.Sprintf("data/%d.lance", i), Fields: []int32{0, 1}[:r.IntN(3)]}},
			}}}},
		}
		b, err := proto.Marshal(txn)
		if err != nil {
			t.Fatal(err)
		}
		got, op, reused, err := d.Decode(b)
		if err != nil || op != OpAppend || !reused || got != &d.block.txn || !proto.Equal(got, txn) {
			t.Fatalf("append %d: %v, %v, reused %v, %v; want %v in the block", i, got, op, reused, err, txn)
		}
	}
	plain := &lancepb.Transaction{ReadVersion: 3, Uuid: "0a0b0c0d-0000-4000-8000-000000000001",
		Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{Fragments: []*lancepb.DataFragment{{
			PhysicalRows: 10, Files: []*lancepb.DataFile{{Path: "data/a.lance", Fields: []int32{0, 1}}},
		}}}},
	}
	pb, err := proto.Marshal(plain)
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { d.Decode(pb) }); n != 0 {
		t.Errorf("decoding the usual append into the block takes %v allocations, want none", n)
	}
	two := proto.CloneOf(plain)
	two.GetAppend().Fragments = append(two.GetAppend().Fragments, proto.CloneOf(plain.GetAppend().Fragments[0]))
	tb, err := proto.Marshal(two)
	if err != nil {
		t.Fatal(err)
	}
	got, _, reused, err := d.Decode(tb)
	if err != nil || reused || got == &d.block.txn || !proto.Equal(got, two) {
		t.Fatalf("two fragments: %v, reused %v, %v", got, reused, err)
	}
}

// TestDecoderStringsAreTheBodys checks where decoded strings live: a
// Decoder's are the body's own bytes (Decode: the caller never changes
// them), DecodeTransaction's a copy that a later change to the body does
// not reach. Both for an Append in the block and one that overflows it.
func TestDecoderStringsAreTheBodys(t *testing.T) {
	frag := func(i int) *lancepb.DataFragment {
		return &lancepb.DataFragment{Id: uint64(i), PhysicalRows: 10, Files: []*lancepb.DataFile{{Path: fmt.Sprintf("data/%d.lance", i), Fields: []int32{0}}}}
	}
	for _, n := range []int{1, 3} {
		txn := &lancepb.Transaction{ReadVersion: 3, Uuid: "0a0b0c0d-0000-4000-8000-000000000001",
			Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{}}}
		for i := range n {
			txn.GetAppend().Fragments = append(txn.GetAppend().Fragments, frag(i))
		}
		b, err := proto.Marshal(txn)
		if err != nil {
			t.Fatal(err)
		}
		within := func(s string) bool {
			p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
			start := uintptr(unsafe.Pointer(&b[0]))
			return start <= p && p+uintptr(len(s)) <= start+uintptr(len(b))
		}
		var d Decoder
		got, op, _, err := d.Decode(b)
		if err != nil || op != OpAppend {
			t.Fatalf("%d fragments: Decode: %v, %v", n, op, err)
		}
		if !within(got.Uuid) || !within(got.GetAppend().Fragments[0].Files[0].Path) {
			t.Errorf("%d fragments: a Decoder's strings are not the body's bytes", n)
		}
		plain, _, err := DecodeTransaction(b)
		if err != nil {
			t.Fatal(err)
		}
		if within(plain.Uuid) || within(plain.GetAppend().Fragments[0].Files[0].Path) {
			t.Errorf("%d fragments: DecodeTransaction's strings are the body's bytes, want a copy", n)
		}
		clear(b)
		if !proto.Equal(plain, txn) {
			t.Errorf("%d fragments: DecodeTransaction's transaction changed with its body: %v", n, plain)
		}
	}
}
