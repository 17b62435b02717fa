package evaluator

import (
	"errors"
	"go/build"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// FuzzDecode feeds arbitrary bytes as a transaction's preconditions. It
// must never panic; it must decide the same way twice; whatever it accepts
// must validate, evaluate, and survive a round trip through the wire form.
func FuzzDecode(f *testing.F) {
	seeds := []*lancepb.Transaction{
		txnWith("replace", 41, cells([]int32{fX}, offs(3, 17, 18), whole(1))),
		txnWith("replace", 41, treeMap([]int32{fX, fY}, tree(uint32(1), nil, uint32(3), bitmapOf(1, 2, 99)))),
		txnWith("replace", 41, cells([]int32{fX}, rawRows(3, rangeBitmap(0, 100)))),
	}
	for _, s := range seeds {
		b, _ := proto.Marshal(s)
		f.Add(b)
	}
	h := newHist(f)
	h.delete(3, 5)
	h.overlay(3, "ov.lance", []int32{fX}, 17)
	pinned := h.pinned()
	f.Fuzz(func(t *testing.T, b []byte) {
		txn := &lancepb.Transaction{}
		if proto.Unmarshal(b, txn) != nil {
			return
		}
		txn.ReadVersion = 41
		txn.Operation = &lancepb.Transaction_DataReplacement_{DataReplacement: &lancepb.Transaction_DataReplacement{}}
		pre, err := Prepare(pinned, txn, Limits{MaxSelectionBytes: 1 << 16})
		pre2, err2 := Prepare(pinned, txn, Limits{MaxSelectionBytes: 1 << 16})
		if (err == nil) != (err2 == nil) || err != nil && err.Error() != err2.Error() {
			t.Fatalf("not deterministic: %v / %v", err, err2)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidPrecondition) {
				t.Fatalf("error %v is not ErrInvalidPrecondition", err)
			}
			return
		}
		for i := range pre {
			if !pre[i].Rows.Equal(pre2[i].Rows) {
				t.Fatal("not deterministic")
			}
		}
		for _, pol := range []DeletionPolicy{ProtectedRows, Strict, Ignore} {
			if _, err := Evaluate(t.Context(), pinned, h.head, pre, Options{Policy: pol, Deletions: h.dv}); err != nil {
				t.Fatalf("valid preconditions do not evaluate: %v", err)
			}
		}
		back, err := Decode(Protos(pre), Limits{})
		if err != nil {
			t.Fatalf("re-encoded preconditions do not decode: %v", err)
		}
		for i := range pre {
			if !back[i].Rows.Equal(pre[i].Rows) || !slices.Equal(back[i].Fields, pre[i].Fields) {
				t.Fatalf("round trip changed precondition %d", i)
			}
		}
	})
}

// FuzzEvaluate feeds arbitrary manifests as the head (any bytes that decode
// into a table.Manifest). Evaluate and Blame must never panic and must
// decide the same way twice. Soundness is the oracle's job.
func FuzzEvaluate(f *testing.F) {
	h := newHist(f)
	h.overlay(3, "ov.lance", []int32{fX, fY}, 17, 18)
	h.delete(3, 5)
	h.replaceColumns(3, "y2.lance", fY)
	b, _ := proto.Marshal(h.head.Proto())
	f.Add(b, uint8(0))
	pinned := h.byVer[43]
	f.Fuzz(func(t *testing.T, b []byte, pol uint8) {
		pb := &lancepb.Manifest{}
		if proto.Unmarshal(b, pb) != nil {
			return
		}
		head, err := table.FromProto(pb)
		if err != nil {
			return
		}
		pre := []Precondition{
			CellsUnchanged(Union(Offsets(3, 5, 17, 99), WholeFragments(1)), fX, fS),
			CellsUnchanged(WholeFragments(3), fY, fSA),
		}
		opts := Options{Policy: DeletionPolicy(pol % 3), Deletions: h.dv}
		v1, err1 := Evaluate(t.Context(), pinned, head, pre, opts)
		v2, err2 := Evaluate(t.Context(), pinned, head, pre, opts)
		if (err1 == nil) != (err2 == nil) || v1.String() != v2.String() {
			t.Fatal("not deterministic")
		}
		Blame(t.Context(), pinned, []Step{{Version: 99, TxnUUID: "x", Manifest: head}}, pre, v1, opts)
	})
}

// TestImports enforces the package's purity: the standard library minus
// I/O, clock and concurrency; the table model; the protobuf messages;
// roaring.
func TestImports(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	banned := []string{"os", "time", "sync", "net", "io/fs", "log", "log/slog", "math/rand", "math/rand/v2", "unsafe", "runtime", "syscall", "reflect"}
	for _, imp := range pkg.Imports {
		switch {
		case imp == "cellguard/table", imp == "cellguard/proto/lancepb", imp == "github.com/RoaringBitmap/roaring/v2":
		case strings.Contains(imp, "."), strings.HasPrefix(imp, "cellguard/"):
			t.Errorf("evaluator imports %s", imp)
		case slices.Contains(banned, imp) || strings.HasPrefix(imp, "sync/") || strings.HasPrefix(imp, "os/"):
			t.Errorf("evaluator imports %s", imp)
		}
	}
}
