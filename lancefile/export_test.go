package lancefile

import (
	"bytes"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancefilepb"
)

// ExtractColumn returns a file holding only column col of the given file,
// its pages copied byte for byte: a small fuzz seed in the encodings the
// original writer (LanceDB) chose.
func ExtractColumn(file []byte, col int) ([]byte, error) {
	r, err := Open(bytes.NewReader(file), int64(len(file)))
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w := &Writer{w: &buf, opts: WriterOptions{Version: r.version}, fields: r.lanceFields[col], rows: r.rows}
	cm := proto.Clone(r.cols[col]).(*lancefilepb.ColumnMetadata)
	for _, pg := range cm.GetPages() {
		for i, off := range pg.GetBufferOffsets() {
			pos, err := w.writeBuffer(gather{file[off : off+pg.GetBufferSizes()[i]]})
			if err != nil {
				return nil, err
			}
			pg.BufferOffsets[i] = uint64(pos)
		}
	}
	w.cols = []*colWriter{{meta: cm}}
	if err := w.writeTail(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// RepeatBuffers returns the file with every page of column 0 listing its
// buffers times times over, all pointing at the same bytes: metadata that
// would make a reader read the same bytes again and again.
func RepeatBuffers(file []byte, times int) ([]byte, error) {
	r, err := Open(bytes.NewReader(file), int64(len(file)))
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w := &Writer{w: &buf, opts: WriterOptions{Version: r.version}, fields: r.fields, rows: r.rows}
	for c, cm := range r.cols {
		cm = proto.Clone(cm).(*lancefilepb.ColumnMetadata)
		for _, pg := range cm.GetPages() {
			offs, sizes := pg.BufferOffsets, pg.BufferSizes
			for i, off := range offs {
				pos, err := w.writeBuffer(gather{file[off : off+sizes[i]]})
				if err != nil {
					return nil, err
				}
				offs[i] = uint64(pos)
			}
			if c == 0 {
				for range times - 1 {
					pg.BufferOffsets = append(pg.BufferOffsets, offs...)
					pg.BufferSizes = append(pg.BufferSizes, sizes...)
				}
			}
		}
		w.cols = append(w.cols, &colWriter{meta: cm})
	}
	if err := w.writeTail(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
