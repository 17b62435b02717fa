package table

// fragment_enc.go encodes a plain appended fragment (an id, data files
// with a path, field lists, format version and size, and a row count)
// with protowire instead of reflection: the deterministic encoding a
// Fragment keeps, byte for byte (TestEncodePlainFragmentMatchesMarshal).
// Any other fragment, or one with a string that is not UTF-8, is encoded
// by proto as before.

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"cellguard/internal/pbwire"
	"cellguard/proto/lancepb"
)

// plainFragment reports whether encodePlainFragment can encode f.
func plainFragment(f *lancepb.DataFragment) bool {
	if f.DeletionFile != nil || f.RowIdSequence != nil || f.LastUpdatedAtVersionSequence != nil ||
		f.CreatedAtVersionSequence != nil || len(f.Overlays) > 0 || len(f.ProtoReflect().GetUnknown()) > 0 {
		return false
	}
	for _, df := range f.Files {
		if df == nil || df.BaseId != nil || len(df.ProtoReflect().GetUnknown()) > 0 || !utf8.ValidString(df.Path) {
			return false
		}
	}
	return true
}

// encodePlainFragment returns the deterministic encoding of plain
// fragment f with its id set to id, in one allocation.
func encodePlainFragment(f *lancepb.DataFragment, id uint64) []byte {
	n := sizePlainFragment(f, id)
	return appendPlainFragment(make([]byte, 0, n), f, id)
}

// newPlainFragment returns plain fragment f with its id set to id, its
// encoding in the same allocation as the Fragment (fragmentWithRoom).
func newPlainFragment(f *lancepb.DataFragment, id uint64) *Fragment {
	x, buf := fragmentWithRoom(sizePlainFragment(f, id))
	*x = Fragment{id: id, rows: f.GetPhysicalRows(), enc: appendPlainFragment(buf, f, id)}
	return x
}

func sizePlainFragment(f *lancepb.DataFragment, id uint64) int {
	n := pbwire.SizeUint(fragID, id) + pbwire.SizeUint(fragPhysicalRows, f.PhysicalRows)
	for _, df := range f.Files {
		n += pbwire.SizeLen(fragFiles, sizeFile(df))
	}
	return n
}

func appendPlainFragment(b []byte, f *lancepb.DataFragment, id uint64) []byte {
	b = pbwire.AppendUint(b, fragID, id)
	for _, df := range f.Files {
		b = protowire.AppendVarint(protowire.AppendTag(b, fragFiles, protowire.BytesType), uint64(sizeFile(df)))
		b = appendFile(b, df)
	}
	return pbwire.AppendUint(b, fragPhysicalRows, f.PhysicalRows)
}

// fragBlock is a Fragment and the array its encoding lives in.
type fragBlock[A any] struct {
	f Fragment
	a A
}

func fragIn[A any](n int, bytes func(*A) []byte) (*Fragment, []byte) {
	x := new(fragBlock[A])
	return &x.f, bytes(&x.a)[:0:n]
}

// fragmentWithRoom returns a zero Fragment and an empty slice with
// capacity n, one allocation for both when n is at most 512 (an appended
// fragment's encoding is about a hundred bytes), in size classes close to
// the allocator's own. The slice's capacity is exactly n: nothing can
// append into the rest of its class.
func fragmentWithRoom(n int) (*Fragment, []byte) {
	switch {
	case n <= 48:
		return fragIn(n, func(a *[48]byte) []byte { return a[:] })
	case n <= 64:
		return fragIn(n, func(a *[64]byte) []byte { return a[:] })
	case n <= 80:
		return fragIn(n, func(a *[80]byte) []byte { return a[:] })
	case n <= 96:
		return fragIn(n, func(a *[96]byte) []byte { return a[:] })
	case n <= 112:
		return fragIn(n, func(a *[112]byte) []byte { return a[:] })
	case n <= 128:
		return fragIn(n, func(a *[128]byte) []byte { return a[:] })
	case n <= 160:
		return fragIn(n, func(a *[160]byte) []byte { return a[:] })
	case n <= 192:
		return fragIn(n, func(a *[192]byte) []byte { return a[:] })
	case n <= 256:
		return fragIn(n, func(a *[256]byte) []byte { return a[:] })
	case n <= 384:
		return fragIn(n, func(a *[384]byte) []byte { return a[:] })
	case n <= 512:
		return fragIn(n, func(a *[512]byte) []byte { return a[:] })
	}
	return new(Fragment), make([]byte, 0, n)
}

func sizeFile(df *lancepb.DataFile) int {
	n := 0
	if df.Path != "" {
		n += pbwire.SizeLen(filePath, len(df.Path))
	}
	if len(df.Fields) > 0 {
		n += pbwire.SizeLen(fileFields, sizeInts(df.Fields))
	}
	if len(df.ColumnIndices) > 0 {
		n += pbwire.SizeLen(fileColumns, sizeInts(df.ColumnIndices))
	}
	return n + pbwire.SizeUint(fileMajor, uint64(df.FileMajorVersion)) + pbwire.SizeUint(fileMinor, uint64(df.FileMinorVersion)) +
		pbwire.SizeUint(fileSizeBytes, df.FileSizeBytes)
}

func appendFile(b []byte, df *lancepb.DataFile) []byte {
	if df.Path != "" {
		b = protowire.AppendString(protowire.AppendTag(b, filePath, protowire.BytesType), df.Path)
	}
	b = appendInts(b, fileFields, df.Fields)
	b = appendInts(b, fileColumns, df.ColumnIndices)
	b = pbwire.AppendUint(b, fileMajor, uint64(df.FileMajorVersion))
	b = pbwire.AppendUint(b, fileMinor, uint64(df.FileMinorVersion))
	return pbwire.AppendUint(b, fileSizeBytes, df.FileSizeBytes)
}

// sizeInts is the size of a packed int32 list's contents (a negative
// value takes ten bytes, sign-extended, as proto encodes it).
func sizeInts(v []int32) int {
	n := 0
	for _, x := range v {
		n += protowire.SizeVarint(uint64(int64(x)))
	}
	return n
}

func appendInts(b []byte, num protowire.Number, v []int32) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendVarint(protowire.AppendTag(b, num, protowire.BytesType), uint64(sizeInts(v)))
	for _, x := range v {
		b = protowire.AppendVarint(b, uint64(int64(x)))
	}
	return b
}
