package table_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// The fuzz targets check, for arbitrary input, that decoding never panics,
// that every error is a *table.Error wrapping the right sentinel, and that
// whatever decodes re-encodes to something that decodes to the same value.
//
//	go test ./table -run '^$' -fuzz FuzzReadManifestFile -fuzztime 60s

func addFixtureSeeds(f *testing.F, pattern string) {
	for _, p := range fixtureFiles(f, pattern) {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

func FuzzReadManifestFile(f *testing.F) {
	addFixtureSeeds(f, "_versions/*.manifest")
	f.Add([]byte{})
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00LANC"))
	// The fixtures have no index section; give the fuzzer one.
	both, err := table.WriteManifestFile(&table.ManifestFile{
		Manifest:    &lancepb.Manifest{Version: 3, TransactionFile: "2-u.txn"},
		Transaction: &lancepb.Transaction{ReadVersion: 2, Uuid: "u"},
		Indexes: &lancepb.IndexSection{Indices: []*lancepb.IndexMetadata{{
			Name: "i", Fields: []int32{1}, FragmentBitmap: arrayBitmapBytes,
		}}},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(both)
	f.Fuzz(func(t *testing.T, b []byte) {
		mf, err := table.ReadManifestFile(b)
		if err != nil {
			if !errorsIsMalformed(err) {
				t.Fatalf("ReadManifestFile error %v (%T) is not a *table.Error wrapping ErrMalformed", err, err)
			}
			return
		}
		out, err := table.WriteManifestFile(mf)
		if err != nil {
			t.Fatalf("WriteManifestFile of a file that read fine: %v", err)
		}
		back, err := table.ReadManifestFile(out)
		if err != nil {
			t.Fatalf("ReadManifestFile(WriteManifestFile(...)): %v", err)
		}
		if !proto.Equal(withoutOffsets(back.Manifest), withoutOffsets(mf.Manifest)) {
			t.Fatalf("manifest changed:\n got %v\nwant %v", back.Manifest, mf.Manifest)
		}
		if (back.Transaction == nil) != (mf.Transaction == nil) || !proto.Equal(back.Transaction, mf.Transaction) {
			t.Fatalf("transaction changed:\n got %v\nwant %v", back.Transaction, mf.Transaction)
		}
		if (back.Indexes == nil) != (mf.Indexes == nil) || !proto.Equal(back.Indexes, mf.Indexes) {
			t.Fatalf("indexes changed:\n got %v\nwant %v", back.Indexes, mf.Indexes)
		}
		again, err := table.WriteManifestFile(back)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("second WriteManifestFile differs (%v)", err)
		}
	})
}

func FuzzDecodeTransaction(f *testing.F) {
	addFixtureSeeds(f, "_transactions/*.txn")
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		txn, op, err := table.DecodeTransaction(b)
		sentinel := classify(t, err)
		if txn == nil {
			if err == nil {
				t.Fatalf("DecodeTransaction = nil, %v, nil", op)
			}
			return
		}
		enc, err := proto.Marshal(txn)
		if err != nil {
			t.Fatalf("proto.Marshal of a decoded transaction: %v", err)
		}
		txn2, op2, err2 := table.DecodeTransaction(enc)
		if txn2 == nil || op2 != op || classify(t, err2) != sentinel {
			t.Fatalf("re-decoded: %v, %v; first decoded: %v, %v", op2, err2, op, err)
		}
		if !proto.Equal(txn2, txn) {
			t.Fatalf("transaction changed:\n got %v\nwant %v", txn2, txn)
		}
	})
}

// classify returns the sentinel err wraps (nil for nil) and fails the test
// unless err is a *table.Error wrapping one of the decoding sentinels.
func classify(t *testing.T, err error) error {
	t.Helper()
	if err == nil {
		return nil
	}
	var te *table.Error
	if !errors.As(err, &te) {
		t.Fatalf("error %v (%T) is not a *table.Error", err, err)
	}
	for _, s := range []error{table.ErrMalformed, table.ErrUnsupportedOperation} {
		if errors.Is(err, s) {
			return s
		}
	}
	t.Fatalf("error %v wraps neither ErrMalformed nor ErrUnsupportedOperation", err)
	return nil
}

// bitmapSeeds returns valid portable bitmaps of every container kind.
func bitmapSeeds(tb testing.TB) [][]byte {
	seeds := [][]byte{arrayBitmapBytes, runBitmapBytes, emptyBitmapBytes}
	r := rand.New(rand.NewPCG(9, 10))
	for range 6 {
		seeds = append(seeds, toBytes(tb, randomBitmap(r)))
	}
	return seeds
}

func FuzzDecodeBitmap(f *testing.F) {
	for _, s := range bitmapSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		bm, err := table.DecodeBitmap(b)
		if err != nil {
			if !errorsIsMalformed(err) {
				t.Fatalf("DecodeBitmap error %v (%T) is not a *table.Error wrapping ErrMalformed", err, err)
			}
			return
		}
		checkDecodedBitmap(t, bm, len(b))
	})
}

// checkDecodedBitmap checks that bm, decoded from size bytes, keeps
// roaring's invariants and survives another encoding.
//
// It never iterates over bm: a few hundred KiB of full run containers hold
// billions of values.
func checkDecodedBitmap(t *testing.T, bm *roaring.Bitmap, size int) {
	t.Helper()
	// Validate is quadratic in the runs of a container; keep it cheap.
	if size <= 16<<10 {
		if err := bm.Validate(); err != nil {
			t.Fatalf("decoded bitmap fails Validate: %v", err)
		}
	}
	enc := toBytes(t, bm)
	back, err := table.DecodeBitmap(enc)
	if err != nil {
		t.Fatalf("DecodeBitmap(ToBytes(decoded)): %v", err)
	}
	if !back.Equals(bm) {
		t.Fatalf("bitmap changed: got %v, want %v", back, bm)
	}
}

func FuzzDecodeRowAddrTreeMap(f *testing.F) {
	f.Add(le32(0))
	f.Add(cat(le32(2), entry(1, nil), entry(3, arrayBitmapBytes)))
	for i, s := range bitmapSeeds(f) {
		if !bytes.Equal(s, emptyBitmapBytes) {
			f.Add(cat(le32(2), entry(uint32(i), s), entry(uint32(i)+7, nil)))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := table.DecodeRowAddrTreeMap(b)
		if err != nil {
			if !errorsIsMalformed(err) {
				t.Fatalf("DecodeRowAddrTreeMap error %v (%T) is not a *table.Error wrapping ErrMalformed", err, err)
			}
			return
		}
		for _, bm := range s {
			if bm != nil {
				if bm.IsEmpty() {
					t.Fatalf("decoded an empty bitmap")
				}
				checkDecodedBitmap(t, bm, len(b))
			}
		}
		enc := s.MarshalRowAddrTreeMap()
		back, err := table.DecodeRowAddrTreeMap(enc)
		if err != nil {
			t.Fatalf("DecodeRowAddrTreeMap(Marshal(decoded)): %v", err)
		}
		if !equalRowSets(back, s) {
			t.Fatalf("row set changed: got %v, want %v", back, s)
		}
		if again := back.MarshalRowAddrTreeMap(); !bytes.Equal(again, enc) {
			t.Fatalf("encoding is not canonical")
		}
	})
}
