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
	w := &Writer{w: &buf, opts: WriterOptions{Version: r.version}, fields: r.fields[col : col+1], rows: r.rows}
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
