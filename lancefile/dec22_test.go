package lancefile

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/pierrec/lz4/v4"

	pb21 "cellguard/proto/lanceenc21pb"
)

func int64Type(t *testing.T) colType {
	ct, err := colTypeOf("x", arrow.PrimitiveTypes.Int64)
	if err != nil {
		t.Fatal(err)
	}
	return ct
}

// TestConstantLayout decodes 2.2 constant pages in the forms Lance 12
// writes them: an inline value, a scalar buffer, definition levels, all
// null, and reading only some rows.
func TestConstantLayout(t *testing.T) {
	i64 := int64Type(t)
	str, _ := colTypeOf("s", arrow.BinaryTypes.String)
	nullable := []pb21.RepDefLayer{pb21.RepDefLayer_REPDEF_NULLABLE_ITEM}
	inline := binary.LittleEndian.AppendUint64(nil, 42)
	// The scalar buffer Lance 12 wrote for the string "same".
	scalar := []byte{2, 0, 0, 0, 8, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 's', 'a', 'm', 'e'}
	defs := []byte{0, 0, 1, 0, 0, 0, 1, 0} // rows 1 and 3 null

	pd := &pageDecoder{op: "test", t: i64, n: 5, lo: 0, hi: 5, v22: true, depth: 1}
	c, err := pd.constant(&pb21.AllNullLayout{Layers: layerAllValid, InlineValue: inline})
	if err != nil || c.n != 5 || c.nulls != 0 || binary.LittleEndian.Uint64(c.fixed[32:]) != 42 {
		t.Fatalf("inline constant: %v, %+v", err, c)
	}

	pd = &pageDecoder{op: "test", t: i64, n: 4, lo: 1, hi: 3, v22: true, depth: 1, bufs: [][]byte{{}, defs}}
	c, err = pd.constant(&pb21.AllNullLayout{Layers: nullable, InlineValue: inline})
	if err != nil || !pd.partial || pd.base != 1 || c.n != 2 || c.valid.get(0) || !c.valid.get(1) {
		t.Fatalf("constant with levels, rows 1–2: %v, partial %v base %d, %+v", err, pd.partial, pd.base, c)
	}

	pd = &pageDecoder{op: "test", t: str, n: 3, lo: 0, hi: 3, v22: true, depth: 1, bufs: [][]byte{scalar}}
	c, err = pd.constant(&pb21.AllNullLayout{Layers: layerAllValid})
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.toArrow()
	if err != nil {
		t.Fatal(err)
	}
	if s := a.(*array.String); s.Len() != 3 || s.Value(2) != "same" {
		t.Fatalf("scalar constant = %v", a)
	}

	pd = &pageDecoder{op: "test", t: i64, n: 1 << 32, lo: 0, hi: 1, v22: true, depth: 1}
	if c, err := pd.constant(&pb21.AllNullLayout{Layers: nullable}); err != nil || !c.allNull {
		t.Fatalf("all-null page: %v, %+v", err, c)
	}

	bad := map[string]struct {
		l    *pb21.AllNullLayout
		t    colType
		bufs [][]byte
	}{
		"no value, non-null":          {&pb21.AllNullLayout{Layers: layerAllValid}, i64, nil},
		"inline of the wrong width":   {&pb21.AllNullLayout{Layers: layerAllValid, InlineValue: []byte{1, 2}}, i64, nil},
		"one buffer and inline":       {&pb21.AllNullLayout{Layers: layerAllValid, InlineValue: inline}, i64, [][]byte{scalar}},
		"scalar overruns":             {&pb21.AllNullLayout{Layers: layerAllValid}, str, [][]byte{{2, 0, 0, 0, 8, 0, 0, 0, 200, 0, 0, 0}}},
		"scalar offsets out of range": {&pb21.AllNullLayout{Layers: layerAllValid}, str, [][]byte{{2, 0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 'x'}}},
		"levels too short":            {&pb21.AllNullLayout{Layers: nullable, InlineValue: inline}, i64, [][]byte{{}, {0, 0}}},
		"valid row without a value":   {&pb21.AllNullLayout{Layers: nullable}, i64, [][]byte{{}, defs}},
	}
	for name, tc := range bad {
		pd := &pageDecoder{op: "test", t: tc.t, n: 4, lo: 0, hi: 4, v22: true, depth: 1, bufs: tc.bufs}
		if _, err := pd.constant(tc.l); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	pd = &pageDecoder{op: "test", t: str, n: 4, lo: 0, hi: 4, v22: true, depth: 1}
	var ue *UnsupportedEncodingError
	if _, err := pd.constant(&pb21.AllNullLayout{Layers: layerAllValid, InlineValue: []byte("same")}); !errors.As(err, &ue) {
		t.Errorf("inline string constant: %v, want *UnsupportedEncodingError", err)
	}
}

// TestDictionaryLZ4 decodes a 2.2 dictionary of three doubles in a raw
// LZ4 block, and refuses one that declares more bytes than the block can
// hold.
func TestDictionaryLZ4(t *testing.T) {
	f64, _ := colTypeOf("f", arrow.PrimitiveTypes.Float64)
	var raw []byte
	for _, v := range []uint64{1, 2, 3} {
		raw = binary.LittleEndian.AppendUint64(raw, v)
	}
	block := make([]byte, lz4.CompressBlockBound(len(raw)))
	n, err := lz4.CompressBlock(raw, block, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("lz4 did not compress the dictionary")
	}
	buf := append(binary.LittleEndian.AppendUint32(nil, uint32(len(raw))), block[:n]...)
	l := &pb21.MiniBlockLayout{
		Dictionary: &pb21.CompressiveEncoding{Compression: &pb21.CompressiveEncoding_General{General: &pb21.General{
			Compression: &pb21.BufferCompression{Scheme: pb21.CompressionScheme_COMPRESSION_ALGORITHM_LZ4},
			Values:      flat21(64)}}},
		NumDictionaryItems: 3,
	}
	pd := &pageDecoder{op: "test", t: f64, bufs: [][]byte{nil, nil, buf}}
	d, err := pd.dictionary(l)
	if err != nil || d.n != 3 || binary.LittleEndian.Uint64(d.fixed[16:]) != 3 {
		t.Fatalf("dictionary: %v, %+v", err, d)
	}
	bomb := append(binary.LittleEndian.AppendUint32(nil, 1<<30), block[:n]...)
	pd.bufs[2] = bomb
	if _, err := pd.dictionary(l); !errors.Is(err, ErrMalformed) {
		t.Errorf("dictionary declaring 1 GiB: %v, want ErrMalformed", err)
	}
	l.NumDictionaryItems = 4
	pd.bufs[2] = buf
	if _, err := pd.dictionary(l); !errors.Is(err, ErrMalformed) {
		t.Errorf("dictionary of 4 items in 24 bytes: %v, want ErrMalformed", err)
	}
}

// TestMiniBlockGrammar checks that a 2.2 page must use the u32 grammar
// (has_large_chunk) and a 2.1 page the u16 one.
func TestMiniBlockGrammar(t *testing.T) {
	i64 := int64Type(t)
	for _, tc := range []struct {
		v22, large bool
	}{{true, false}, {false, true}} {
		pd := &pageDecoder{op: "test", t: i64, n: 1, hi: 1, v22: tc.v22, depth: 1, bufs: [][]byte{{0, 0}, make([]byte, 16)}}
		l := &pb21.MiniBlockLayout{ValueCompression: flat21(64), Layers: layerAllValid, NumBuffers: 1, NumItems: 1, HasLargeChunk: tc.large}
		var ue *UnsupportedEncodingError
		if _, err := pd.miniBlock(l); !errors.As(err, &ue) {
			t.Errorf("2.2 %v, has_large_chunk %v: %v, want *UnsupportedEncodingError", tc.v22, tc.large, err)
		}
	}
}
