package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"cellguard/lancefile"
	"cellguard/table"
)

// tailBytes is how much of a Lance file's end is read when the file is
// opened: the footer, the offset tables, the schema and the column
// metadata of a file with a few hundred pages fit in it, so opening a
// file again costs no I/O. Pages are read by range when a read needs them.
const tailBytes = 64 << 10

// legacyExt is the extension of the Arrow IPC data files that cellguard
// wrote before it wrote Lance files. They are still read, never written.
const legacyExt = ".arrow"

// lanceMeta is what the Store keeps of an opened Lance file: its size and
// its last bytes. It is immutable and may be shared.
type lanceMeta struct {
	size    int64
	tailOff int64
	tail    []byte
}

// blobReaderAt reads one object of a bucket by ranges, serving reads that
// fall inside the cached tail from memory. It lives for one call of the
// Store, so it may carry that call's context.
type blobReaderAt struct {
	ctx context.Context
	s   *Store
	key string
	m   *lanceMeta
}

func (r *blobReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > r.m.size {
		return 0, fmt.Errorf("read at %d of a %d-byte file", off, r.m.size)
	}
	if off >= r.m.tailOff && off+int64(len(p)) <= r.m.size {
		return copy(p, r.m.tail[off-r.m.tailOff:]), nil
	}
	n := min(int64(len(p)), r.m.size-off)
	rr, err := r.s.bucket.NewRangeReader(r.ctx, r.key, off, n, nil)
	if err != nil {
		return 0, err
	}
	defer rr.Close()
	got, err := io.ReadFull(rr, p[:n])
	if err == nil && int(n) < len(p) {
		err = io.EOF
	}
	return got, err
}

// openLance opens the Lance file at key (relative to the dataset root),
// reading its tail once and then from the cache.
func (s *Store) openLance(ctx context.Context, op, key string) (*lancefile.Reader, error) {
	m, ok := s.metas.get(key)
	if !ok {
		var err error
		if m, err = s.readTail(ctx, op, key); err != nil {
			return nil, err
		}
		s.metas.put(key, m, int64(len(m.tail)+len(key)))
	}
	rd, err := lancefile.Open(&blobReaderAt{ctx: ctx, s: s, key: key, m: m}, m.size)
	if err != nil {
		return nil, lanceErr(op, key, err)
	}
	return rd, nil
}

func (s *Store) readTail(ctx context.Context, op, key string) (*lanceMeta, error) {
	attrs, err := s.bucket.Attributes(ctx, key)
	if err != nil {
		return nil, s.readErr(op, key, err)
	}
	if err := checkRegular(key, attrs); err != nil {
		return nil, err
	}
	m := &lanceMeta{size: attrs.Size, tailOff: max(0, attrs.Size-tailBytes)}
	if m.size == 0 {
		return m, nil
	}
	rr, err := s.bucket.NewRangeReader(ctx, key, m.tailOff, m.size-m.tailOff, nil)
	if err != nil {
		return nil, s.readErr(op, key, err)
	}
	defer rr.Close()
	m.tail = make([]byte, m.size-m.tailOff)
	if _, err := io.ReadFull(rr, m.tail); err != nil {
		return nil, fmt.Errorf("data: %s: read %s: %w", op, key, err)
	}
	return m, nil
}

// lanceErr turns an error of package lancefile about the file at key into
// ours: bytes that do not follow the format are a *FormatError; an
// encoding, type or version lancefile does not decode (the compressed
// encodings LanceDB writes by default, say) is ErrUnsupported, wrapping
// lancefile's error that names it; I/O errors pass through with the
// operation.
func lanceErr(op, key string, err error) error {
	var (
		enc *lancefile.UnsupportedEncodingError
		typ *lancefile.UnsupportedTypeError
		ver *lancefile.UnsupportedVersionError
	)
	switch {
	case errors.Is(err, lancefile.ErrMalformed):
		return formatErr(key, err, "not a readable Lance file")
	case errors.As(err, &enc), errors.As(err, &typ), errors.As(err, &ver):
		return fmt.Errorf("data: %s: %s: %w: %w", op, key, ErrUnsupported, err)
	}
	return fmt.Errorf("data: %s: %s: %w", op, key, err)
}

// lanceColumn returns column idx of rd, or the column recording field id
// when idx is -1, checking that it holds field id with type t.
func lanceColumn(key string, rd *lancefile.Reader, idx, id int32, t arrow.DataType) (int, error) {
	schema := rd.Schema()
	if idx < 0 {
		for i, f := range schema.Fields() {
			if got, ok := fieldIDOf(f, lancefile.FieldIDKey); ok && got == id {
				idx = int32(i)
				break
			}
		}
		if idx < 0 {
			return 0, formatErr(key, nil, "no column for field %d", id)
		}
	}
	if int(idx) >= schema.NumFields() {
		return 0, formatErr(key, nil, "column %d for field %d, file has %d columns", idx, id, schema.NumFields())
	}
	f := schema.Field(int(idx))
	if got, ok := fieldIDOf(f, lancefile.FieldIDKey); ok && got != id {
		return 0, formatErr(key, nil, "column %d holds field %d, manifest says field %d", idx, got, id)
	}
	if !arrow.TypeEqual(f.Type, t) {
		return 0, formatErr(key, nil, "column %d (field %d) has type %s, schema says %s", idx, id, f.Type, t)
	}
	return int(idx), nil
}

// fieldIDOf returns the field id an Arrow field records under key, if any.
func fieldIDOf(f arrow.Field, key string) (int32, bool) {
	i := f.Metadata.FindKey(key)
	if i < 0 {
		return 0, false
	}
	id, err := strconv.ParseInt(f.Metadata.Values()[i], 10, 32)
	if err != nil {
		return 0, false
	}
	return int32(id), true
}

// fileColumn is one column of a data or overlay file, read for one call:
// either all of its rows (whole), or only the rows asked for, in order.
type fileColumn struct {
	arr   arrow.Array
	whole bool
}

// readColumn reads field id (column idx, -1 for "find it") of the data or
// overlay file at path, relative to the data directory. rows is the number
// of rows the file must have, or -1 when only a minimum is known (an
// overlay file holds at least as many values as it covers). With a
// non-nil take and a column not already cached, only the rows in take are
// read; otherwise the whole column is read and cached.
func (s *Store) readColumn(ctx context.Context, op, path string, idx, id int32, t arrow.DataType, rows int64, take []uint32) (fileColumn, error) {
	key := dataDir + path
	if strings.HasSuffix(path, legacyExt) {
		col, err := s.legacyColumn(ctx, op, key, idx, id, t)
		if err != nil {
			return fileColumn{}, err
		}
		if rows >= 0 && int64(col.Len()) != rows {
			return fileColumn{}, formatErr(key, nil, "field %d has %d rows, the fragment %d", id, col.Len(), rows)
		}
		return fileColumn{arr: col, whole: true}, nil
	}
	rd, err := s.openLance(ctx, op, key)
	if err != nil {
		return fileColumn{}, err
	}
	c, err := lanceColumn(key, rd, idx, id, t)
	if err != nil {
		return fileColumn{}, err
	}
	if rows >= 0 && rd.NumRows() != uint64(rows) {
		return fileColumn{}, formatErr(key, nil, "field %d has %d rows, the fragment %d", id, rd.NumRows(), rows)
	}
	ckey := key + "#" + strconv.Itoa(c)
	if col, ok := s.columns.get(ckey); ok {
		return fileColumn{arr: col, whole: true}, nil
	}
	if take != nil {
		rec, err := rd.Take([]int{c}, toRows(take))
		if err != nil {
			return fileColumn{}, lanceErr(op, key, err)
		}
		col := rec.Column(0)
		col.Retain()
		rec.Release()
		return fileColumn{arr: col}, nil
	}
	col, err := rd.ReadColumn(c, 0, rd.NumRows())
	if err != nil {
		return fileColumn{}, lanceErr(op, key, err)
	}
	s.columns.put(ckey, col, int64(col.Data().SizeInBytes()))
	return fileColumn{arr: col, whole: true}, nil
}

func toRows(offsets []uint32) []uint64 {
	rows := make([]uint64, len(offsets))
	for i, o := range offsets {
		rows[i] = uint64(o)
	}
	return rows
}

// legacyColumn reads a column of an Arrow IPC data file of an older
// cellguard.
func (s *Store) legacyColumn(ctx context.Context, op, key string, idx, id int32, t arrow.DataType) (arrow.Array, error) {
	f, ok := s.legacy.get(key)
	if !ok {
		b, err := s.read(ctx, op, key)
		if err != nil {
			return nil, err
		}
		if f, err = decodeIPC(key, b); err != nil {
			return nil, err
		}
		s.legacy.put(key, f, f.size)
	}
	return column(key, f, idx, id, t)
}

// fileVersion returns the Lance file version of the bytes a data file
// with these manifest numbers holds, as this package writes it.
func fileVersion(major, minor uint32) (lancefile.Version, bool) {
	switch {
	case major == 2 && minor == 1:
		return lancefile.V2_1, true
	case major == 2 && minor == 2:
		return lancefile.V2_2, true
	case major == 2 && minor == 0, major == 0 && minor == 3:
		return lancefile.V2_0, true
	}
	return 0, false
}

// FileVersion returns the Lance file format version of the data files of
// the dataset at m: its data_format ("2.0", "2.1" or "2.2"). Every file
// written for a transaction on m must have this version; a dataset whose
// files mix versions still reads, but Lance then fails every later append
// or optimize. A manifest without a data format is read as Lance reads it:
// the version of its data files, which must agree; with no data file to
// tell, Lance takes it for a legacy (0.x) table. Legacy and unknown
// versions give ErrUnsupported: this package writes 2.0, 2.1 and 2.2.
func FileVersion(m *table.Manifest) (lancefile.Version, error) {
	const op = "file version"
	df := m.DataFormat()
	switch v := df.GetVersion(); {
	case df == nil:
		return inferVersion(m)
	case df.GetFileFormat() != "lance":
		return 0, errorf(op, ErrUnsupported, "version %d has data file format %q", m.Version(), df.GetFileFormat())
	default:
		fv, err := lancefile.ParseVersion(v)
		if err != nil {
			return 0, errorf(op, ErrUnsupported, "version %d has data storage version %q; this package writes 2.0, 2.1 and 2.2", m.Version(), v)
		}
		return fv, nil
	}
}

// inferVersion is the version of the data files of m, which must agree.
func inferVersion(m *table.Manifest) (lancefile.Version, error) {
	var v lancefile.Version
	seen := false
	for f := range m.Fragments() {
		if len(f.Files()) == 0 {
			continue
		}
		fv, err := FragmentVersion(f)
		if err != nil {
			return 0, err
		}
		if seen && fv != v {
			return 0, errorf("file version", ErrUnsupported, "version %d has no data format and its files mix versions %s and %s", m.Version(), v, fv)
		}
		v, seen = fv, true
	}
	if !seen {
		return 0, errorf("file version", ErrUnsupported, "version %d has no data format and no data file to infer it from (Lance reads it as a legacy table)", m.Version())
	}
	return v, nil
}
