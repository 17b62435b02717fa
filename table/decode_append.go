package table

// decode_append.go decodes the most common transaction, an Append of
// plain fragments, in a few allocations instead of one per message,
// slice and string; and an Overwrite of plain fragments (a dataset's
// creation) the same way, its schema's fields decoded one by one. It is a
// fast path of DecodeTransaction only: anything it does not recognise
// (another operation, an optional part of a fragment, an Overwrite's
// metadata, configuration or bases, an unknown field, a field given
// twice, a string that is not UTF-8, a malformed varint, an empty bytes
// field) makes it decline, and the general decoder decodes the body as it
// always did. Whatever it accepts decodes to a transaction equal to the
// general decoder's (TestDecodeAppendMatchesProto and FuzzDecodeAppend
// check it on generated and mutated bodies).
//
// The messages are allocated together: a one-fragment, one-file Append
// in a single block, decoded in one pass; a larger one as the transaction
// with its Append, the fragments in one slice, the data files in one, the
// preconditions in one and their fragment rows in one, all field lists in
// one. Every string is a substring of one copy of the body (of the body
// itself, for a Decoder: see Decoder.Decode), and every bytes field a
// piece of another copy (made only if there is one). Each slice
// handed out has its length as capacity, so appending to one never writes
// into its neighbour.

import (
	"slices"
	"unicode/utf8"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// Field numbers the fast path reads.
const (
	txnReadVersion protowire.Number = 1
	txnUUID        protowire.Number = 2
	txnTag         protowire.Number = 3
	txnPrecond     protowire.Number = 5
	txnAppend      protowire.Number = 100
	txnOverwrite   protowire.Number = 102

	precondCells protowire.Number = 1

	cellsFieldIDs protowire.Number = 1
	cellsRows     protowire.Number = 2
	cellsTreeMap  protowire.Number = 3

	rowsFragment protowire.Number = 1
	rowsWhole    protowire.Number = 2
	rowsBitmap   protowire.Number = 3

	appendFragments protowire.Number = 1

	overwriteFragments protowire.Number = 1
	overwriteSchema    protowire.Number = 2

	fragID           protowire.Number = 1
	fragFiles        protowire.Number = 2
	fragPhysicalRows protowire.Number = 4

	filePath      protowire.Number = 1
	fileFields    protowire.Number = 2
	fileColumns   protowire.Number = 3
	fileMajor     protowire.Number = 4
	fileMinor     protowire.Number = 5
	fileSizeBytes protowire.Number = 6
)

// appendBlock holds a one-fragment, one-file Append in one allocation.
type appendBlock struct {
	txn      lancepb.Transaction
	op       lancepb.Transaction_Append_
	app      lancepb.Transaction_Append
	fragPtrs [1]*lancepb.DataFragment
	frags    [1]lancepb.DataFragment
	filePtrs [1]*lancepb.DataFile
	files    [1]lancepb.DataFile
	ints     [8]int32
}

// txnBlock holds the transaction and its Append when the slices are
// allocated apart.
type txnBlock struct {
	txn lancepb.Transaction
	op  lancepb.Transaction_Append_
	app lancepb.Transaction_Append
}

// overwriteBlock holds the transaction and its Overwrite.
type overwriteBlock struct {
	txn lancepb.Transaction
	op  lancepb.Transaction_Overwrite_
	ow  lancepb.Transaction_Overwrite
}

// precondBlock is one precondition with its kind and contents.
type precondBlock struct {
	p     lancepb.Precondition
	kind  lancepb.Precondition_CellsUnchanged
	cells lancepb.CellsUnchanged
}

// rowsBlock is one FragmentRows with room for either selection.
type rowsBlock struct {
	r      lancepb.FragmentRows
	whole  lancepb.FragmentRows_WholeFragment
	bitmap lancepb.FragmentRows_OffsetBitmap
}

// appendDecoder decodes in one pass into a block for one fragment and
// one data file, the usual Append. A larger one overflows the block, and
// is decoded in two passes over the same code: the first (counting) only
// checks and counts; the second fills what the counts sized.
type appendDecoder struct {
	counting  bool
	overflow  bool   // filling ran out of room: count first
	inBlock   bool   // filling a one-fragment block in one pass
	overwrite bool   // the operation is an Overwrite, not an Append
	body      string // the body as a string: string fields are substrings of it
	raw       []byte // a copy of the body: bytes fields are pieces of it
	base      []byte // the body, to find a field's offset in it

	nFrags, nFiles, nInts, nPre, nRows int // counted, then handed out
	nFields                            int // an Overwrite's schema fields
	hasBytes                           bool
	rvStart, rvEnd                     int    // the read_version field, tag included: base[rvStart:rvEnd]
	firstFrag                          []byte // the first fragment's encoding, a piece of base

	pres    []precondBlock
	prePtrs []*lancepb.Precondition
	rows    []rowsBlock
	rowPtrs []*lancepb.FragmentRows

	frags    []lancepb.DataFragment
	fragPtrs []*lancepb.DataFragment
	files    []lancepb.DataFile
	filePtrs []*lancepb.DataFile
	ints     []int32

	schema    []lancepb.Field
	schemaPtr []*lancepb.Field
}

// decodeAppend decodes b if it is an Append or Overwrite the fast path
// recognises, and says which (op). Given a Decoder (into), an Append that
// fits a guardedBlock is decoded into the Decoder's (reused), in one pass
// with no scan before it, and the Decoder notes its fragment's bytes if
// they are canonical.
func decodeAppend(b []byte, into *Decoder) (txn *lancepb.Transaction, op Op, reused, ok bool) {
	var reuse *guardedBlock
	if into != nil {
		reuse, into.raw = &into.block, nil
	}
	hasPre := false
	if reuse == nil { // decline another operation before allocating
		var known bool
		if known, hasPre = scanTop(b); !known {
			return nil, OpUnknown, false, false
		}
	} // else the block's pass declines it, and overflows beyond one precondition or on an Overwrite
	body := bodyString(b, into != nil)
	if !hasPre { // no room for preconditions in one pass
		d := appendDecoder{base: b, body: body}
		if into != nil {
			txn = d.intoGuarded(&into.block)
		} else {
			txn = d.small()
		}
		if d.txn(b, txn) {
			into.decoded(&d, b, reuse != nil)
			return txn, OpAppend, reuse != nil, d.nFrags > 0
		}
		if !d.overflow {
			return nil, OpUnknown, false, false
		}
	}
	d := appendDecoder{counting: true, base: b}
	if !d.txn(b, nil) || d.nFrags == 0 && !d.overwrite {
		return nil, OpUnknown, false, false
	}
	txn, reused = d.allocate(reuse)
	d.counting, d.body = false, body
	if d.hasBytes {
		d.raw = slices.Clone(b)
	}
	d.nFrags, d.nFiles, d.nInts, d.nPre, d.nRows, d.nFields = 0, 0, 0, 0, 0, 0
	if !d.txn(b, txn) {
		// Only a schema field the counting pass does not decode can fail
		// here (nextField); the general decoder decides it.
		return nil, OpUnknown, false, false
	}
	into.decoded(&d, b, reused)
	op = OpAppend
	if d.overwrite {
		op = OpOverwrite
	}
	return txn, op, reused, true
}

// decoded notes, for Apply and Land, the transaction d has just decoded
// from b: its fragment's bytes when they are in the block (reused) and
// canonical, and where its read_version field is. A nil Decoder, or an
// Append of no fragment (not the fast path's), notes nothing.
func (dec *Decoder) decoded(d *appendDecoder, b []byte, reused bool) {
	if dec == nil || d.nFrags == 0 && !d.overwrite {
		return
	}
	if reused && d.nFrags == 1 && canonicalFragment(d.firstFrag) {
		dec.raw = d.firstFrag
	}
	dec.body, dec.rvStart, dec.rvEnd = b, d.rvStart, d.rvEnd
}

// bodyString returns b as a string: a copy, or, for a Decoder (shared),
// b itself, which the Decoder's caller promises never to change (Decode).
// The copy was most of what a decode into the Decoder's block allocated,
// and bytes that are written once and never again need no second copy.
func bodyString(b []byte, shared bool) string {
	if shared && len(b) > 0 {
		return unsafe.String(&b[0], len(b))
	}
	return string(b)
}

// scanTop reports whether transaction b has an Append or Overwrite field
// (known) and a precondition field at its top level.
func scanTop(b []byte) (known, hasPre bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false, false
		}
		known = known || num == txnAppend || num == txnOverwrite
		hasPre = hasPre || num == txnPrecond
		m := consumeValue(num, typ, b[n:])
		if m < 0 {
			return false, false
		}
		b = b[n+m:]
	}
	return known, hasPre
}

// small returns a transaction in a one-fragment block, with d's slices
// at the block's capacity.
func (d *appendDecoder) small() *lancepb.Transaction { return d.into(&appendBlock{}) }

// guardedBlock is an appendBlock with room for one precondition selecting
// one fragment: such an Append, the usual guarded one, is one allocation.
type guardedBlock struct {
	appendBlock
	prePtrs [1]*lancepb.Precondition
	pres    [1]precondBlock
	rowPtrs [1]*lancepb.FragmentRows
	rows    [1]rowsBlock
}

// intoGuarded zeroes block x and returns its transaction, with d's
// slices at the block's capacity, a precondition's included.
func (d *appendDecoder) intoGuarded(x *guardedBlock) *lancepb.Transaction {
	*x = guardedBlock{}
	d.pres, d.prePtrs, d.rows, d.rowPtrs = x.pres[:], x.prePtrs[:], x.rows[:], x.rowPtrs[:]
	return d.into(&x.appendBlock)
}

// into returns the transaction of block x, with d's slices at the block's
// capacity.
func (d *appendDecoder) into(x *appendBlock) *lancepb.Transaction {
	d.inBlock = true
	x.op.Append = &x.app
	x.txn.Operation = &x.op
	d.frags, d.fragPtrs = x.frags[:], x.fragPtrs[:]
	d.files, d.filePtrs = x.files[:], x.filePtrs[:]
	d.ints = x.ints[:]
	return &x.txn
}

// room reports whether filling has room for item n (counting from 0) of
// a kind it has room for have of, and notes an overflow if not.
func (d *appendDecoder) room(n, have int) bool {
	if n < have {
		return true
	}
	d.overflow = true
	return false
}

// allocate sizes the messages the counting pass found, an Append's or an
// Overwrite's. The usual guarded Append goes into reuse when that is not
// nil (reused).
func (d *appendDecoder) allocate(reuse *guardedBlock) (txn *lancepb.Transaction, reused bool) {
	small := !d.overwrite && d.nFrags == 1 && d.nFiles <= 1 && d.nInts <= len(appendBlock{}.ints)
	if small && d.nPre == 1 && d.nRows == 1 {
		x := reuse
		if x == nil {
			x = &guardedBlock{}
		}
		txn := d.intoGuarded(x)
		d.files, d.filePtrs, d.ints = d.files[:d.nFiles], d.filePtrs[:d.nFiles], d.ints[:d.nInts]
		return txn, reuse != nil
	}
	if d.nPre > 0 {
		d.pres, d.prePtrs = make([]precondBlock, d.nPre), make([]*lancepb.Precondition, d.nPre)
	}
	if d.nRows > 0 {
		d.rows, d.rowPtrs = make([]rowsBlock, d.nRows), make([]*lancepb.FragmentRows, d.nRows)
	}
	if small {
		txn := d.small()
		d.files, d.filePtrs, d.ints = d.files[:d.nFiles], d.filePtrs[:d.nFiles], d.ints[:d.nInts]
		return txn, false
	}
	if d.overwrite {
		x := &overwriteBlock{}
		x.op.Overwrite = &x.ow
		x.txn.Operation = &x.op
		txn = &x.txn
		d.schema, d.schemaPtr = make([]lancepb.Field, d.nFields), make([]*lancepb.Field, d.nFields)
	} else {
		x := &txnBlock{}
		x.op.Append = &x.app
		x.txn.Operation = &x.op
		txn = &x.txn
	}
	d.frags, d.fragPtrs = make([]lancepb.DataFragment, d.nFrags), make([]*lancepb.DataFragment, d.nFrags)
	d.files, d.filePtrs = make([]lancepb.DataFile, d.nFiles), make([]*lancepb.DataFile, d.nFiles)
	d.ints = make([]int32, d.nInts)
	return txn, false
}

// fields calls field for each field of message b, in order. It reports
// false on malformed input or when field does.
func fields(b []byte, field func(num protowire.Number, typ protowire.Type, v []byte) bool) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		m := consumeValue(num, typ, b)
		if m < 0 || typ != protowire.VarintType && typ != protowire.BytesType {
			return false // the fast path reads no other wire type
		}
		if !field(num, typ, b[:m]) {
			return false
		}
		b = b[m:]
	}
	return true
}

// consumeValue returns the length of the value of a field of type typ at
// the start of b, or a negative number if it is malformed: the common
// types directly, others (groups) through protowire.ConsumeFieldValue.
func consumeValue(num protowire.Number, typ protowire.Type, b []byte) int {
	var m int
	switch typ {
	case protowire.VarintType:
		_, m = protowire.ConsumeVarint(b)
	case protowire.BytesType:
		_, m = protowire.ConsumeBytes(b)
	case protowire.Fixed32Type:
		_, m = protowire.ConsumeFixed32(b)
	case protowire.Fixed64Type:
		_, m = protowire.ConsumeFixed64(b)
	default:
		m = protowire.ConsumeFieldValue(num, typ, b)
	}
	return m
}

// once reports whether bit is not yet in seen, and adds it.
func once(seen *uint32, bit uint) bool {
	if *seen&(1<<bit) != 0 {
		return false
	}
	*seen |= 1 << bit
	return true
}

func varint(typ protowire.Type, v []byte) (uint64, bool) {
	if typ != protowire.VarintType {
		return 0, false
	}
	x, n := protowire.ConsumeVarint(v)
	return x, n == len(v)
}

// bytesField returns the contents of a length-delimited field value.
func bytesField(typ protowire.Type, v []byte) ([]byte, bool) {
	if typ != protowire.BytesType {
		return nil, false
	}
	x, n := protowire.ConsumeBytes(v)
	return x, n == len(v)
}

// str returns the string field value v (its contents), a substring of the
// body when filling.
func (d *appendDecoder) str(typ protowire.Type, v []byte) (string, bool) {
	x, ok := bytesField(typ, v)
	if !ok || !utf8.Valid(x) {
		return "", false
	}
	if d.counting || len(x) == 0 {
		return "", true
	}
	off := cap(d.base) - cap(x) // x lies within base, and ends where it ends
	if off < 0 || off+len(x) > len(d.body) {
		return "", false
	}
	return d.body[off : off+len(x)], true
}

func (d *appendDecoder) txn(b []byte, txn *lancepb.Transaction) bool {
	var seen uint32
	end := 0 // where the previous field ends in base: where this one starts
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		start := end
		end = cap(d.base) - cap(v) + len(v)
		switch num {
		case txnReadVersion:
			x, ok := varint(typ, v)
			if ok && txn != nil {
				txn.ReadVersion = x
			}
			d.rvStart, d.rvEnd = start, end
			return ok && once(&seen, 0)
		case txnUUID, txnTag:
			s, ok := d.str(typ, v)
			if ok && txn != nil {
				if num == txnUUID {
					txn.Uuid = s
				} else {
					txn.Tag = s
				}
			}
			return ok && once(&seen, uint(num))
		case txnAppend:
			x, ok := bytesField(typ, v)
			return ok && once(&seen, 4) && d.append(x, txn)
		case txnOverwrite:
			x, ok := bytesField(typ, v)
			if !ok || !once(&seen, 4) {
				return false
			}
			if d.inBlock { // a block holds an Append: count, then fill an Overwrite
				d.overflow = true
				return false
			}
			d.overwrite = true
			return d.overwriteOp(x, txn)
		case txnPrecond:
			x, ok := bytesField(typ, v)
			if !ok {
				return false
			}
			var p *precondBlock
			if !d.counting {
				if !d.room(d.nPre, len(d.pres)) {
					return false
				}
				p = &d.pres[d.nPre]
				d.prePtrs[d.nPre] = &p.p
				if d.nPre == 0 {
					txn.Preconditions = d.prePtrs[:len(d.prePtrs):len(d.prePtrs)]
				}
			}
			d.nPre++
			return d.precondition(x, p)
		}
		return false
	})
}

// bytes returns the bytes field value v (its contents, never empty), a
// piece of the body's copy when filling.
func (d *appendDecoder) bytes(typ protowire.Type, v []byte) ([]byte, bool) {
	x, ok := bytesField(typ, v)
	if !ok || len(x) == 0 {
		return nil, false
	}
	d.hasBytes = true
	if d.counting {
		return nil, true
	}
	if d.raw == nil { // one pass: bytes are found by counting first
		d.overflow = true
		return nil, false
	}
	off := cap(d.base) - cap(x)
	if off < 0 || off+len(x) > len(d.raw) {
		return nil, false
	}
	return d.raw[off : off+len(x) : off+len(x)], true
}

func (d *appendDecoder) precondition(b []byte, p *precondBlock) bool {
	var seen uint32
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		x, ok := bytesField(typ, v)
		if !ok || num != precondCells || !once(&seen, 1) {
			return false
		}
		if p != nil {
			p.kind.CellsUnchanged = &p.cells
			p.p.Kind = &p.kind
		}
		return d.cells(x, p)
	})
}

func (d *appendDecoder) cells(b []byte, p *precondBlock) bool {
	var seen uint32
	first := d.nRows
	ok := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		switch num {
		case cellsFieldIDs:
			ints, ok := d.packed(typ, v)
			if ok && p != nil {
				p.cells.FieldIds = ints
			}
			return ok && once(&seen, uint(num))
		case cellsTreeMap:
			x, ok := d.bytes(typ, v)
			if ok && p != nil {
				p.cells.RowAddrTreeMap = x
			}
			return ok && once(&seen, uint(num))
		case cellsRows:
			x, ok := bytesField(typ, v)
			if !ok {
				return false
			}
			var r *rowsBlock
			if p != nil {
				if !d.room(d.nRows, len(d.rows)) {
					return false
				}
				r = &d.rows[d.nRows]
				d.rowPtrs[d.nRows] = &r.r
			}
			d.nRows++
			return d.fragmentRows(x, r)
		}
		return false
	})
	if ok && p != nil && d.nRows > first {
		p.cells.Rows = d.rowPtrs[first:d.nRows:d.nRows]
	}
	return ok
}

func (d *appendDecoder) fragmentRows(b []byte, r *rowsBlock) bool {
	var seen uint32
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		switch num {
		case rowsFragment:
			x, ok := varint(typ, v)
			if ok && r != nil {
				r.r.FragmentId = x
			}
			return ok && once(&seen, 1)
		case rowsWhole:
			x, ok := varint(typ, v)
			if ok && r != nil {
				r.whole.WholeFragment = x != 0
				r.r.Selection = &r.whole
			}
			return ok && once(&seen, 2) // the selection: whole or bitmap, once
		case rowsBitmap:
			x, ok := d.bytes(typ, v)
			if ok && r != nil {
				r.bitmap.OffsetBitmap = x
				r.r.Selection = &r.bitmap
			}
			return ok && once(&seen, 2)
		}
		return false
	})
}

func (d *appendDecoder) append(b []byte, txn *lancepb.Transaction) bool {
	first := d.nFrags
	ok := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		x, ok := bytesField(typ, v)
		return ok && num == appendFragments && d.nextFragment(x)
	})
	if ok && txn != nil && d.nFrags > first {
		txn.GetAppend().Fragments = d.fragPtrs[first:d.nFrags:d.nFrags]
	}
	return ok
}

// overwriteOp decodes an Overwrite of fragments and a schema; any other
// part of it (schema metadata, configuration, initial bases) declines.
func (d *appendDecoder) overwriteOp(b []byte, txn *lancepb.Transaction) bool {
	first, firstField := d.nFrags, d.nFields
	ok := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		x, ok := bytesField(typ, v)
		if !ok {
			return false
		}
		switch num {
		case overwriteFragments:
			return d.nextFragment(x)
		case overwriteSchema:
			return d.nextField(x)
		}
		return false
	})
	if ok && txn != nil {
		ow := txn.GetOverwrite()
		if d.nFrags > first {
			ow.Fragments = d.fragPtrs[first:d.nFrags:d.nFrags]
		}
		if d.nFields > firstField {
			ow.Schema = d.schemaPtr[firstField:d.nFields:d.nFields]
		}
	}
	return ok
}

// nextFragment decodes b, the encoding of the operation's next fragment.
func (d *appendDecoder) nextFragment(b []byte) bool {
	var f *lancepb.DataFragment
	if !d.counting {
		if !d.room(d.nFrags, len(d.frags)) {
			return false
		}
		f = &d.frags[d.nFrags]
		d.fragPtrs[d.nFrags] = f
	}
	if d.nFrags == 0 {
		d.firstFrag = b
	}
	d.nFrags++
	return d.fragment(b, f)
}

// nextField decodes b, the encoding of an Overwrite's next schema field,
// with proto.Unmarshal when filling (a schema has few fields, and a field
// has many optional parts): its strings are copies, as the general
// decoder's are.
func (d *appendDecoder) nextField(b []byte) bool {
	if !d.counting {
		if !d.room(d.nFields, len(d.schema)) {
			return false
		}
		f := &d.schema[d.nFields]
		if err := proto.Unmarshal(b, f); err != nil {
			return false
		}
		d.schemaPtr[d.nFields] = f
	}
	d.nFields++
	return true
}

func (d *appendDecoder) fragment(b []byte, f *lancepb.DataFragment) bool {
	var seen uint32
	first := d.nFiles
	ok := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		switch num {
		case fragID, fragPhysicalRows:
			x, ok := varint(typ, v)
			if ok && f != nil {
				if num == fragID {
					f.Id = x
				} else {
					f.PhysicalRows = x
				}
			}
			return ok && once(&seen, uint(num))
		case fragFiles:
			x, ok := bytesField(typ, v)
			if !ok {
				return false
			}
			var file *lancepb.DataFile
			if f != nil {
				if !d.room(d.nFiles, len(d.files)) {
					return false
				}
				file = &d.files[d.nFiles]
				d.filePtrs[d.nFiles] = file
			}
			d.nFiles++
			return d.file(x, file)
		}
		return false
	})
	if ok && f != nil && d.nFiles > first {
		f.Files = d.filePtrs[first:d.nFiles:d.nFiles]
	}
	return ok
}

func (d *appendDecoder) file(b []byte, f *lancepb.DataFile) bool {
	var seen uint32
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		switch num {
		case filePath:
			s, ok := d.str(typ, v)
			if ok && f != nil {
				f.Path = s
			}
			return ok && once(&seen, uint(num))
		case fileFields, fileColumns:
			ints, ok := d.packed(typ, v)
			if ok && f != nil {
				if num == fileFields {
					f.Fields = ints
				} else {
					f.ColumnIndices = ints
				}
			}
			return ok && once(&seen, uint(num))
		case fileMajor, fileMinor, fileSizeBytes:
			x, ok := varint(typ, v)
			if ok && f != nil {
				switch num {
				case fileMajor:
					f.FileMajorVersion = uint32(x)
				case fileMinor:
					f.FileMinorVersion = uint32(x)
				default:
					f.FileSizeBytes = x
				}
			}
			return ok && once(&seen, uint(num))
		}
		return false
	})
}

// packed decodes a packed, non-empty repeated int32 field value.
func (d *appendDecoder) packed(typ protowire.Type, v []byte) ([]int32, bool) {
	x, ok := bytesField(typ, v)
	if !ok || len(x) == 0 {
		return nil, false
	}
	first := d.nInts
	for len(x) > 0 {
		n, m := protowire.ConsumeVarint(x)
		if m < 0 {
			return nil, false
		}
		if !d.counting {
			if !d.room(d.nInts, len(d.ints)) {
				return nil, false
			}
			d.ints[d.nInts] = int32(n)
		}
		d.nInts++
		x = x[m:]
	}
	if d.counting {
		return nil, true
	}
	return d.ints[first:d.nInts:d.nInts], true
}
