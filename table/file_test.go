package table_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// A small fixture manifest file: version 1 of the V1-named history, with an
// inline transaction.
const smallFixture = "testdata/lance/v1-manifest-paths/_versions/1.manifest"

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// assemble builds a manifest file by hand: prefix (sections, gaps, garbage
// — whatever the case needs), then m at len(prefix), then the footer.
func assemble(t *testing.T, prefix []byte, m *lancepb.Manifest) []byte {
	t.Helper()
	mb, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return assembleRaw(prefix, mb)
}

func assembleRaw(prefix, manifest []byte) []byte {
	b := append([]byte(nil), prefix...)
	pos := uint64(len(b))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(manifest)))
	b = append(b, manifest...)
	b = binary.LittleEndian.AppendUint64(b, pos)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint16(b, 2)
	return append(b, "LANC"...)
}

// lenPrefixed returns msg's bytes preceded by their u32 LE length.
func lenPrefixed(t *testing.T, msg proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.LittleEndian.AppendUint32(nil, uint32(len(b))), b...)
}

func u64(v uint64) *uint64 { return &v }

// patch returns a copy of b with the bytes at off replaced by p.
func patch(b []byte, off int, p []byte) []byte {
	c := append([]byte(nil), b...)
	copy(c[off:], p)
	return c
}

func TestReadManifestFileErrors(t *testing.T) {
	good := readFile(t, smallFixture)
	n := len(good)
	le32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	le64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	pos := int(binary.LittleEndian.Uint64(good[n-16:]))
	txn := &lancepb.Transaction{ReadVersion: 3, Uuid: "u"}

	tests := []struct {
		name string
		in   []byte
		want string // in the error message
	}{
		{"empty", nil, "truncated: 0 bytes"},
		{"ten bytes", make([]byte, 10), "truncated: 10 bytes"},
		{"footer only", good[n-16:], "truncated: 16 bytes"},
		{"wrong magic", patch(good, n-4, []byte("LANX")), `wrong magic "LANX"`},
		{"lowercase magic", patch(good, n-4, []byte("lanc")), "wrong magic"},
		{"major version 1", patch(good, n-8, []byte{1, 0}), "unsupported manifest file version 1.2"},
		{"minor version 0", patch(good, n-6, []byte{0, 0}), "unsupported manifest file version 0.0"},
		{"minor version 3", patch(good, n-6, []byte{3, 0}), "unsupported manifest file version 0.3"},
		{"negative manifest position", patch(good, n-16, le64(math.MaxUint64)), "manifest position -1 out of range"},
		{"manifest position past footer", patch(good, n-16, le64(uint64(n))), "out of range"},
		{"manifest position inside footer", patch(good, n-16, le64(uint64(n-17))), "out of range"},
		{"manifest position one early", patch(good, n-16, le64(uint64(pos-1))), "manifest length"},
		{"manifest position one late", patch(good, n-16, le64(uint64(pos+1))), "manifest length"},
		{"manifest length too big", patch(good, pos, le32(500000)), "manifest length 500000 overruns file"},
		{"manifest length max", patch(good, pos, le32(math.MaxUint32)), "overruns file"},
		{"manifest length too small", patch(good, pos, le32(3)), "unaccounted for"},
		{"manifest not protobuf", assembleRaw(nil, []byte{0xff, 0xff, 0xff}), "manifest: "},
		{
			"transaction section offset out of range",
			assemble(t, nil, &lancepb.Manifest{Version: 1, TransactionSection: u64(1000)}),
			"transaction section offset 1000 out of range: the manifest starts at 0",
		},
		{
			"transaction section offset huge",
			assemble(t, make([]byte, 8), &lancepb.Manifest{Version: 1, TransactionSection: u64(math.MaxUint64)}),
			"transaction section offset 18446744073709551615 out of range",
		},
		{
			"transaction section prefix runs into manifest",
			assemble(t, make([]byte, 8), &lancepb.Manifest{Version: 1, TransactionSection: u64(6)}),
			"transaction section offset 6 out of range",
		},
		{
			"transaction section length overruns",
			assemble(t, append(le32(100), 1, 2), &lancepb.Manifest{Version: 1, TransactionSection: u64(0)}),
			"transaction section length 100 at offset 0 overruns the manifest at 6",
		},
		{
			"transaction section not protobuf",
			assemble(t, append(le32(2), 0xff, 0xff), &lancepb.Manifest{Version: 1, TransactionSection: u64(0)}),
			"transaction section: ",
		},
		{
			"index section out of range",
			assemble(t, nil, &lancepb.Manifest{Version: 1, IndexSection: u64(7)}),
			"index section offset 7 out of range",
		},
		{
			"index section length overruns",
			assemble(t, le32(math.MaxUint32), &lancepb.Manifest{Version: 1, IndexSection: u64(0)}),
			"index section length 4294967295 at offset 0 overruns",
		},
		{
			"index section not protobuf",
			assemble(t, append(le32(1), 0x80), &lancepb.Manifest{Version: 1, IndexSection: u64(0)}),
			"index section: ",
		},
		{
			"sections overlap",
			assemble(t, lenPrefixed(t, txn), &lancepb.Manifest{Version: 1, IndexSection: u64(0), TransactionSection: u64(0)}),
			"index section [0, 9) overlaps transaction section [0, 9)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := table.ReadManifestFile(tt.in)
			if err == nil {
				t.Fatalf("ReadManifestFile = %v, nil; want error containing %q", f, tt.want)
			}
			if !errorsIsMalformed(err) {
				t.Errorf("ReadManifestFile error %v (%T) is not a *table.Error wrapping ErrMalformed", err, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ReadManifestFile error = %q; want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestReadManifestFileTruncated(t *testing.T) {
	for _, path := range []string{smallFixture, fixtureFiles(t, "_versions/*.manifest")[0]} {
		good := readFile(t, path)
		for n := range len(good) {
			if _, err := table.ReadManifestFile(good[:n]); !errorsIsMalformed(err) {
				t.Fatalf("ReadManifestFile(%s[:%d]) error = %v; want ErrMalformed", path, n, err)
			}
		}
		// Dropping leading bytes shifts every offset; it must not panic, and
		// what it reports must be typed.
		for k := 1; k < len(good); k++ {
			if _, err := table.ReadManifestFile(good[k:]); err != nil && !errorsIsMalformed(err) {
				t.Fatalf("ReadManifestFile(%s[%d:]) error = %v; want ErrMalformed", path, k, err)
			}
		}
	}
}

func TestReadManifestFileCorrupted(t *testing.T) {
	good := readFile(t, smallFixture)
	// Every byte of the footer and of the manifest's length prefix is
	// checked: flipping any bit of them is detected.
	pos := int(binary.LittleEndian.Uint64(good[len(good)-16:]))
	checked := []int{pos, pos + 1, pos + 2, pos + 3}
	for i := len(good) - 16; i < len(good); i++ {
		checked = append(checked, i)
	}
	for _, i := range checked {
		for bit := range 8 {
			c := patch(good, i, []byte{good[i] ^ 1<<bit})
			if _, err := table.ReadManifestFile(c); !errorsIsMalformed(err) {
				t.Errorf("flipping bit %d of byte %d: error = %v; want ErrMalformed", bit, i, err)
			}
		}
	}
	// Anywhere else a flipped bit may or may not be caught by protobuf, but
	// reading never panics and every error is typed.
	for i := range len(good) {
		for bit := range 8 {
			c := patch(good, i, []byte{good[i] ^ 1<<bit})
			if _, err := table.ReadManifestFile(c); err != nil && !errorsIsMalformed(err) {
				t.Fatalf("flipping bit %d of byte %d: error = %v; want ErrMalformed", bit, i, err)
			}
		}
	}
}

func TestReadManifestFileGarbage(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		b := make([]byte, r.IntN(200))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		if i%2 == 0 && len(b) >= 16 {
			// Give half of them a plausible footer so the checks behind it run.
			copy(b[len(b)-8:], []byte{0, 0, 2, 0, 'L', 'A', 'N', 'C'})
			binary.LittleEndian.PutUint64(b[len(b)-16:], uint64(r.IntN(len(b))))
		}
		if _, err := table.ReadManifestFile(b); err != nil && !errorsIsMalformed(err) {
			t.Fatalf("ReadManifestFile(%x) error = %v; want ErrMalformed", b, err)
		}
	}
}

func TestManifestFileRoundTrip(t *testing.T) {
	manifest := &lancepb.Manifest{
		Version:         7,
		Config:          map[string]string{"b": "2", "a": "1", "c": "3"},
		Fragments:       []*lancepb.DataFragment{{Id: 3, PhysicalRows: 10}},
		Fields:          []*lancepb.Field{{Name: "x", Id: 0, ParentId: -1, LogicalType: "int64"}},
		MaxFragmentId:   proto.Uint32(3),
		TransactionFile: "6-abc.txn",
		// Stale offsets: WriteManifestFile must replace or clear them.
		IndexSection:       u64(12345),
		TransactionSection: u64(999),
	}
	txn := &lancepb.Transaction{ReadVersion: 6, Uuid: "abc",
		Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{}}}
	indexes := &lancepb.IndexSection{Indices: []*lancepb.IndexMetadata{{Name: "idx", Fields: []int32{0}, DatasetVersion: 5}}}

	tests := []struct {
		name string
		in   *table.ManifestFile
	}{
		{"manifest only", &table.ManifestFile{Manifest: manifest}},
		{"with transaction", &table.ManifestFile{Manifest: manifest, Transaction: txn}},
		{"with indexes", &table.ManifestFile{Manifest: manifest, Indexes: indexes}},
		{"with both", &table.ManifestFile{Manifest: manifest, Transaction: txn, Indexes: indexes}},
		{"empty sections", &table.ManifestFile{Manifest: manifest, Transaction: &lancepb.Transaction{}, Indexes: &lancepb.IndexSection{}}},
		{"empty manifest", &table.ManifestFile{Manifest: &lancepb.Manifest{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := proto.CloneOf(tt.in.Manifest)
			b, err := table.WriteManifestFile(tt.in)
			if err != nil {
				t.Fatalf("WriteManifestFile: %v", err)
			}
			if !proto.Equal(tt.in.Manifest, before) {
				t.Errorf("WriteManifestFile modified the caller's manifest")
			}
			if got := string(b[len(b)-8:]); got != "\x00\x00\x02\x00LANC" {
				t.Errorf("footer version and magic = %q; want 0.2 LANC", got)
			}
			again, err := table.WriteManifestFile(tt.in)
			if err != nil || !bytes.Equal(again, b) {
				t.Errorf("WriteManifestFile is not deterministic")
			}
			got, err := table.ReadManifestFile(b)
			if err != nil {
				t.Fatalf("ReadManifestFile(WriteManifestFile(...)): %v", err)
			}
			if !proto.Equal(withoutOffsets(got.Manifest), withoutOffsets(tt.in.Manifest)) {
				t.Errorf("manifest = %v; want %v", got.Manifest, tt.in.Manifest)
			}
			if (got.Transaction == nil) != (tt.in.Transaction == nil) || !proto.Equal(got.Transaction, tt.in.Transaction) {
				t.Errorf("transaction = %v; want %v", got.Transaction, tt.in.Transaction)
			}
			if (got.Indexes == nil) != (tt.in.Indexes == nil) || !proto.Equal(got.Indexes, tt.in.Indexes) {
				t.Errorf("indexes = %v; want %v", got.Indexes, tt.in.Indexes)
			}
			// Sections come first, index then transaction, at the offsets recorded.
			var wantIdx, wantTxn *uint64
			next := uint64(0)
			if tt.in.Indexes != nil {
				wantIdx = u64(next)
				next += 4 + uint64(proto.Size(tt.in.Indexes))
			}
			if tt.in.Transaction != nil {
				wantTxn = u64(next)
			}
			if !equalPtr(got.Manifest.IndexSection, wantIdx) || !equalPtr(got.Manifest.TransactionSection, wantTxn) {
				t.Errorf("offsets index=%v transaction=%v; want %v %v",
					fmtPtr(got.Manifest.IndexSection), fmtPtr(got.Manifest.TransactionSection), fmtPtr(wantIdx), fmtPtr(wantTxn))
			}
		})
	}
}

func equalPtr(a, b *uint64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func fmtPtr(p *uint64) any {
	if p == nil {
		return "none"
	}
	return *p
}

func TestReadManifestFileAccepts(t *testing.T) {
	txn := &lancepb.Transaction{ReadVersion: 3, Uuid: "u"}
	m := &lancepb.Manifest{Version: 4, TransactionSection: u64(5)}
	// Lance writes its sections back to back, but a reader goes by the
	// offsets, so unused bytes between sections are not an error.
	gap := assemble(t, append([]byte{9, 9, 9, 9, 9}, lenPrefixed(t, txn)...), m)
	f, err := table.ReadManifestFile(gap)
	if err != nil {
		t.Fatalf("ReadManifestFile(gap before section): %v", err)
	}
	if !proto.Equal(f.Transaction, txn) || f.Indexes != nil {
		t.Errorf("ReadManifestFile(gap before section) = %v, %v; want %v, nil", f.Transaction, f.Indexes, txn)
	}
	// The footer version of older writers, 0.1.
	v01 := patch(gap, len(gap)-6, []byte{1, 0})
	if _, err := table.ReadManifestFile(v01); err != nil {
		t.Errorf("ReadManifestFile(version 0.1 footer): %v", err)
	}
}

func TestWriteManifestFileErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   *table.ManifestFile
		want string
	}{
		{"nil file", nil, "no manifest"},
		{"nil manifest", &table.ManifestFile{Transaction: &lancepb.Transaction{}}, "no manifest"},
		{"invalid utf-8", &table.ManifestFile{Manifest: &lancepb.Manifest{Tag: "\xff"}}, "manifest: "},
		{"invalid utf-8 in transaction", &table.ManifestFile{Manifest: &lancepb.Manifest{}, Transaction: &lancepb.Transaction{Uuid: "\xff"}}, "transaction section: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := table.WriteManifestFile(tt.in)
			if !errorsIsMalformed(err) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("WriteManifestFile = %d bytes, %v; want ErrMalformed containing %q", len(b), err, tt.want)
			}
		})
	}
}

func TestManifestFileName(t *testing.T) {
	for _, tt := range []struct {
		version uint64
		v2      bool
		want    string
	}{
		{1, false, "1.manifest"},
		{42, false, "42.manifest"},
		{1, true, "18446744073709551614.manifest"},
		{10, true, "18446744073709551605.manifest"},
		{math.MaxUint64 - 1, true, "00000000000000000001.manifest"},
		{math.MaxUint64, true, "00000000000000000000.manifest"},
	} {
		if got := table.ManifestFileName(tt.version, tt.v2); got != tt.want {
			t.Errorf("ManifestFileName(%d, %v) = %q; want %q", tt.version, tt.v2, got, tt.want)
		}
	}
}

func TestParseManifestFileName(t *testing.T) {
	for _, tt := range []struct {
		name    string
		version uint64
		ok      bool
	}{
		{"1.manifest", 1, true},
		{"123.manifest", 123, true},
		{"18446744073709551614.manifest", 1, true},
		{"18446744073709551605.manifest", 10, true},
		{"00000000000000000000.manifest", math.MaxUint64, true},
		{"_versions/7.manifest", 7, true},
		{"s3://bucket/t/_versions/18446744073709551613.manifest", 2, true},
		{"0.manifest", 0, false},                                      // no version 0
		{"18446744073709551615.manifest", 0, false},                   // V2 for version 0
		{"99999999999999999999.manifest", 0, false},                   // beyond u64
		{"184467440737095516140.manifest", 0, false},                  // 21 digits
		{"d5.manifest", 0, false},                                     // detached
		{"d18446744073709551610.manifest", 0, false},                  // detached
		{"01.manifest", 0, false},                                     // not canonical
		{"+1.manifest", 0, false},                                     // sign
		{"-1.manifest", 0, false},                                     // sign
		{" 1.manifest", 0, false},                                     // space
		{"1.manifest-8a3e0c1f-1111-2222-3333-444455556666", 0, false}, // staging
		{"1.manifest.tmp", 0, false},
		{".manifest", 0, false},
		{"1.txn", 0, false},
		{"1", 0, false},
		{"", 0, false},
		{"1.MANIFEST", 0, false},
	} {
		v, ok := table.ParseManifestFileName(tt.name)
		if v != tt.version || ok != tt.ok {
			t.Errorf("ParseManifestFileName(%q) = %d, %v; want %d, %v", tt.name, v, ok, tt.version, tt.ok)
		}
	}
	// Round trip. A V1 name of 20 digits (versions ≥ 10^19) reads as V2 —
	// Lance decides the scheme by length too — so V1 stops short of that.
	for _, v := range []uint64{1, 2, 9, 10, 99, 100, 1 << 32, 1e18, 1e19 - 1} {
		for _, v2 := range []bool{false, true} {
			name := table.ManifestFileName(v, v2)
			if got, ok := table.ParseManifestFileName(name); !ok || got != v {
				t.Errorf("ParseManifestFileName(ManifestFileName(%d, %v) = %q) = %d, %v", v, v2, name, got, ok)
			}
		}
	}
	for _, v := range []uint64{1e19, math.MaxUint64} {
		name := table.ManifestFileName(v, true)
		if got, ok := table.ParseManifestFileName(name); !ok || got != v {
			t.Errorf("ParseManifestFileName(%q) = %d, %v; want %d", name, got, ok, v)
		}
	}
}

func TestTransactionFileName(t *testing.T) {
	if got, want := table.TransactionFileName(5, "25ed8674-e54d-4dcd-bd4c-cade24b90dce"), "5-25ed8674-e54d-4dcd-bd4c-cade24b90dce.txn"; got != want {
		t.Errorf("TransactionFileName = %q; want %q", got, want)
	}
	if got, want := table.TransactionFileName(0, "x"), "0-x.txn"; got != want {
		t.Errorf("TransactionFileName = %q; want %q", got, want)
	}
}
