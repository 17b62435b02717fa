package evaluator

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// The golden scenarios below are the specification of Evaluate and Blame,
// one per rule and per policy. Each starts from the test table at version
// 41 (fragments 0–3 of 100 rows; fields id, x, y, z and a struct s{a, b};
// base files (id, x), y, z and s per fragment), commits a history, and
// evaluates the preconditions read at the pinned version against head.
// Versions after 41 are committed by transactions named txn-<version>.
// Expected verdicts omit details; TestDetails checks them separately.

type scenario struct {
	name      string
	history   func(h *hist)
	pre       []Precondition
	policy    DeletionPolicy
	deletions func(h *hist) table.DeletionVectors // default: the history's own
	want      string
}

func x3(offsets ...uint32) []Precondition {
	return []Precondition{CellsUnchanged(Offsets(3, offsets...), fX)}
}

var scenarios = []scenario{
	// ── The motivating case: y = f(x) read x at version 41. ──────────────
	{
		name: "motivating: an overlay update of x rows 17-18 in fragment 3 rejects, naming x, fragment 3, the rows, the version and the txn",
		history: func(h *hist) {
			h.overlay(3, "ov-x-42.lance", []int32{fX}, 17, 18)
		},
		pre:  []Precondition{CellsUnchanged(WholeFragments(0, 1, 2, 3), fX)},
		want: "reject\nprecondition 0 field 1 fragment 3: OverlayChanged rows [17 18] at version 42 by txn-42",
	},
	{
		name: "motivating: a REWRITE_COLUMNS update of x in fragment 3 replaces the file holding x",
		history: func(h *hist) {
			h.replaceColumns(3, "f3-x-42.lance", fX)
		},
		pre:  []Precondition{CellsUnchanged(WholeFragments(0, 1, 2, 3), fX)},
		want: "reject\nprecondition 0 field 1 fragment 3: BaseDataReplaced rows [0 1 2 3 4 5 6 7] at version 42 by txn-42",
	},
	{
		name: "motivating: a REWRITE_ROWS update of rows 17-18 deletes them in place (and reinserts them elsewhere)",
		history: func(h *hist) {
			h.rewriteRows(3, 4, 17, 18)
		},
		pre:  []Precondition{CellsUnchanged(RowRange(3, 10, 30), fX)},
		want: "reject\nprecondition 0 field 1 fragment 3: ProtectedRowsDeleted rows [17 18] at version 42 by txn-42",
	},
	{
		name: "an untouched table accepts",
		history: func(h *hist) {
		},
		pre:  []Precondition{CellsUnchanged(WholeFragments(0, 1, 2, 3), fX, fY, fZ, fS)},
		want: "accept",
	},

	// ── Base data, per field. ────────────────────────────────────────────
	{
		name: "field-disjoint writers on one fragment: publishing y does not reject z = g(x)",
		history: func(h *hist) {
			h.replaceColumns(3, "f3-y-42.lance", fY)
		},
		pre:  []Precondition{CellsUnchanged(WholeFragments(3), fX)},
		want: "accept",
	},
	{
		name: "field-disjoint writers: y and z both republished, x and id still accept",
		history: func(h *hist) {
			h.replaceColumns(3, "f3-y-42.lance", fY)
			h.replaceColumns(3, "f3-z-43.lance", fZ)
		},
		pre:  []Precondition{CellsUnchanged(WholeFragments(3), fX, fID)},
		want: "accept",
	},
	{
		name: "the field gains a data file (it read as NULL before, e.g. after a Merge that wrote no data for it)",
		history: func(h *hist) {
			h.editFragment(3, func(pb *lancepb.DataFragment) { pb.Files = append(pb.Files[:1:1], pb.Files[2:]...) })
			h.pin()
			h.editFragment(3, func(pb *lancepb.DataFragment) { pb.Files = append(pb.Files, dataFile("f3-y-43.lance", fY)) })
		},
		pre:  []Precondition{CellsUnchanged(Offsets(3, 5), fY)},
		want: "reject\nprecondition 0 field 2 fragment 3: BaseDataReplaced rows [5] at version 43 by txn-43",
	},
	{
		name: "the column index of the field inside the same file changes",
		history: func(h *hist) {
			h.editFragment(3, func(pb *lancepb.DataFragment) { pb.Files[0].ColumnIndices = []int32{1, 0} })
		},
		pre:  x3(5),
		want: "reject\nprecondition 0 field 1 fragment 3: BaseDataReplaced rows [5] at version 42 by txn-42",
	},
	{
		name: "a base path id redefined under an unchanged data file",
		history: func(h *hist) {
			h.editFragment(3, func(pb *lancepb.DataFragment) {
				base := uint32(7)
				pb.Files[0].BaseId = &base
			})
			h.commit(func(b *table.Builder) {
				b.Header().BasePaths = []*lancepb.BasePath{{Id: 7, Path: "s3://a"}}
			})
			h.pin()
			h.commit(func(b *table.Builder) {
				b.Header().BasePaths = []*lancepb.BasePath{{Id: 7, Path: "s3://b"}}
			})
		},
		pre:  x3(5),
		want: "reject\nprecondition 0 field 1 fragment 3: BaseDataReplaced rows [5] at version 44 by txn-44",
	},

	// ── Deletions: ProtectedRows (default), Strict, Ignore. ──────────────
	{
		name:    "delete of unrelated rows of a protected fragment: accept under ProtectedRows",
		history: func(h *hist) { h.delete(3, 50, 51) },
		pre:     x3(17, 18),
		policy:  ProtectedRows,
		want:    "accept",
	},
	{
		name:    "delete of unrelated rows of a protected fragment: reject under Strict",
		history: func(h *hist) { h.delete(3, 50, 51) },
		pre:     x3(17, 18),
		policy:  Strict,
		want:    "reject\nprecondition 0 field 1 fragment 3: DeletionsChanged rows [17 18] at version 42 by txn-42",
	},
	{
		name:    "delete of unrelated rows of a protected fragment: accept under Ignore",
		history: func(h *hist) { h.delete(3, 50, 51) },
		pre:     x3(17, 18),
		policy:  Ignore,
		want:    "accept",
	},
	{
		name:    "delete of a protected row: reject under ProtectedRows",
		history: func(h *hist) { h.delete(3, 17, 50) },
		pre:     x3(17, 18),
		want:    "reject\nprecondition 0 field 1 fragment 3: ProtectedRowsDeleted rows [17] at version 42 by txn-42",
	},
	{
		name:    "delete of a protected row: reject under Strict",
		history: func(h *hist) { h.delete(3, 17, 50) },
		pre:     x3(17, 18),
		policy:  Strict,
		want:    "reject\nprecondition 0 field 1 fragment 3: DeletionsChanged rows [17] at version 42 by txn-42",
	},
	{
		name:    "delete of a protected row: accept under Ignore",
		history: func(h *hist) { h.delete(3, 17, 50) },
		pre:     x3(17, 18),
		policy:  Ignore,
		want:    "accept",
	},
	{
		name:    "a whole-fragment selection protects every row, so any delete in it rejects",
		history: func(h *hist) { h.delete(3, 99) },
		pre:     []Precondition{CellsUnchanged(WholeFragments(3), fX)},
		want:    "reject\nprecondition 0 field 1 fragment 3: ProtectedRowsDeleted rows [99] at version 42 by txn-42",
	},
	{
		name: "a protected row already deleted at the read version stays deleted: accept",
		history: func(h *hist) {
			h.delete(3, 17)
			h.pin()
			h.delete(3, 50)
		},
		pre:  x3(17, 18),
		want: "accept",
	},
	{
		name: "Restore brings back a protected row deleted at the read version: reject",
		history: func(h *hist) {
			h.delete(3, 17)
			h.pin()
			h.restore(41)
		},
		pre:  x3(17, 18),
		want: "reject\nprecondition 0 field 1 fragment 3: ProtectedRowsDeleted rows [17] at version 43 by txn-43",
	},
	{
		name: "as many protected rows deleted as at the read version, but not the same ones: reject",
		history: func(h *hist) {
			h.delete(3, 18) // v42: {18}
			h.restore(41)   // v43: {}
			h.delete(3, 17) // v44: {17}
			h.pin()         // read at 44
			h.restore(42)   // v45: {18}
		},
		pre:  x3(17, 18),
		want: "reject\nprecondition 0 field 1 fragment 3: ProtectedRowsDeleted rows [17 18] at version 45 by txn-45",
	},
	{
		name:      "deletion vectors unavailable: a changed deletion file counts as a change",
		history:   func(h *hist) { h.delete(3, 50) },
		pre:       x3(17, 18),
		deletions: func(*hist) table.DeletionVectors { return nil },
		want:      "reject\nprecondition 0 field 1 fragment 3: DeletionsChanged rows [17 18] at version 42 by txn-42",
	},
	{
		name:      "a deletion vector that cannot be read counts as a change",
		history:   func(h *hist) { h.delete(3, 50) },
		pre:       x3(17, 18),
		deletions: func(*hist) table.DeletionVectors { return table.MemDeletions{} },
		want:      "reject\nprecondition 0 field 1 fragment 3: DeletionsChanged rows [17 18] at version 42 by txn-42",
	},

	// ── Overlays. ────────────────────────────────────────────────────────
	{
		name:    "overlay added over protected cells: reject",
		history: func(h *hist) { h.overlay(3, "ov-42.lance", []int32{fY, fX}, 18, 40) },
		pre:     x3(17, 18),
		want:    "reject\nprecondition 0 field 1 fragment 3: OverlayChanged rows [18] at version 42 by txn-42",
	},
	{
		name:    "overlay added on the protected field only at other rows: accept",
		history: func(h *hist) { h.overlay(3, "ov-42.lance", []int32{fX}, 50, 51) },
		pre:     x3(17, 18),
		want:    "accept",
	},
	{
		name:    "overlay added at the protected rows of another field only: accept",
		history: func(h *hist) { h.overlay(3, "ov-42.lance", []int32{fY}, 17, 18) },
		pre:     x3(17, 18),
		want:    "accept",
	},
	{
		name: "overlay narrowed outside the protected cells (a DataReplacement of y tombstones y in an x+y overlay): accept",
		history: func(h *hist) {
			h.overlay(3, "ov-xy-42.lance", []int32{fX, fY}, 17, 18)
			h.pin()
			h.replaceColumns(3, "f3-y-43.lance", fY)
		},
		pre:  x3(17, 18),
		want: "accept",
	},
	{
		name: "overlay coverage narrowed above the last protected row: accept",
		history: func(h *hist) {
			h.overlay(3, "ov-42.lance", []int32{fX}, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20)
			h.pin()
			h.editFragment(3, func(pb *lancepb.DataFragment) {
				pb.Overlays[0].Coverage = &lancepb.DataOverlayFile_SharedOffsetBitmap{SharedOffsetBitmap: rangeBitmap(10, 16)}
			})
		},
		pre:  x3(12),
		want: "accept",
	},
	{
		name: "overlay coverage narrowed below a protected row moves where its value is stored (rank): reject",
		history: func(h *hist) {
			h.overlay(3, "ov-42.lance", []int32{fX}, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20)
			h.pin()
			h.editFragment(3, func(pb *lancepb.DataFragment) {
				pb.Overlays[0].Coverage = &lancepb.DataOverlayFile_SharedOffsetBitmap{SharedOffsetBitmap: rangeBitmap(13, 21)}
			})
		},
		pre:  x3(18),
		want: "reject\nprecondition 0 field 1 fragment 3: OverlayChanged rows [18] at version 43 by txn-43",
	},
	{
		name: "the protected field tombstoned inside an overlay that covered protected rows: reject",
		history: func(h *hist) {
			h.overlay(3, "ov-xy-42.lance", []int32{fX, fY}, 17, 18)
			h.pin()
			h.editFragment(3, func(pb *lancepb.DataFragment) { pb.Overlays[0].DataFile.Fields[0] = table.Tombstone })
		},
		pre:  x3(17, 18),
		want: "reject\nprecondition 0 field 1 fragment 3: OverlayChanged rows [17 18] at version 43 by txn-43",
	},
	{
		name: "an overlay re-stamped with another committed version: reject",
		history: func(h *hist) {
			h.overlay(3, "ov-42.lance", []int32{fX}, 17)
			h.pin()
			h.editFragment(3, func(pb *lancepb.DataFragment) { pb.Overlays[0].CommittedVersion = 43 })
		},
		pre:  x3(17, 18),
		want: "reject\nprecondition 0 field 1 fragment 3: OverlayChanged rows [17] at version 43 by txn-43",
	},
	{
		name: "sparse coverage: an overlay whose x bitmap misses the protected rows is ignored",
		history: func(h *hist) {
			h.editFragment(3, func(pb *lancepb.DataFragment) {
				pb.Overlays = append(pb.Overlays, &lancepb.DataOverlayFile{
					DataFile: dataFile("ov-42.lance", fX, fY),
					Coverage: &lancepb.DataOverlayFile_FieldCoverage{FieldCoverage: &lancepb.FieldCoverage{
						OffsetBitmaps: [][]byte{bitmapOf(50), bitmapOf(17, 18)},
					}},
					CommittedVersion: 42,
				})
			})
		},
		pre:  x3(17, 18),
		want: "accept",
	},
	{
		name: "an overlay folded into a new base file: reject (the base changed)",
		history: func(h *hist) {
			h.overlay(3, "ov-42.lance", []int32{fX}, 17)
			h.pin()
			h.replaceColumns(3, "f3-x-43.lance", fX)
		},
		pre:  x3(17, 18),
		want: "reject\nprecondition 0 field 1 fragment 3: BaseDataReplaced rows [17 18] at version 43 by txn-43",
	},

	// ── Schema. ──────────────────────────────────────────────────────────
	{
		name:    "dropped field: every protected fragment rejects",
		history: func(h *hist) { h.drop(fX) },
		pre:     []Precondition{CellsUnchanged(RowAddresses(1<<32|5, 3<<32|17), fX)},
		want: "reject\nprecondition 0 field 1 fragment 1: FieldDropped rows [5] at version 42 by txn-42" +
			"\nprecondition 0 field 1 fragment 3: FieldDropped rows [17] at version 42 by txn-42",
	},
	{
		name:    "dropping another field, and pruning its files: accept",
		history: func(h *hist) { h.drop(fZ) },
		pre:     x3(17),
		want:    "accept",
	},
	{
		name: "retyped field: reject",
		history: func(h *hist) {
			h.schemaEdit(func(fs []*lancepb.Field) []*lancepb.Field { fs[fX].LogicalType = "int32"; return fs })
		},
		pre:  x3(17),
		want: "reject\nprecondition 0 field 1 fragment 3: SchemaChanged rows [17] at version 42 by txn-42",
	},
	{
		name: "nullability changed: reject",
		history: func(h *hist) {
			h.schemaEdit(func(fs []*lancepb.Field) []*lancepb.Field { fs[fX].Nullable = false; return fs })
		},
		pre:  x3(17),
		want: "reject\nprecondition 0 field 1 fragment 3: SchemaChanged rows [17] at version 42 by txn-42",
	},
	{
		name: "renamed field (and new metadata): accept",
		history: func(h *hist) {
			h.schemaEdit(func(fs []*lancepb.Field) []*lancepb.Field {
				fs[fX].Name = "x_renamed"
				fs[fX].Metadata = map[string][]byte{"k": []byte("v")}
				return fs
			})
		},
		pre:  x3(17),
		want: "accept",
	},
	{
		name:    "nested: protecting a struct protects its children, so rewriting s.a rejects",
		history: func(h *hist) { h.replaceColumns(3, "f3-sa-42.lance", fSA) },
		pre:     []Precondition{CellsUnchanged(Offsets(3, 1), fS)},
		want:    "reject\nprecondition 0 field 4 fragment 3: BaseDataReplaced rows [1] at version 42 by txn-42",
	},
	{
		name:    "nested: rewriting s.b does not reject a precondition on s.a",
		history: func(h *hist) { h.replaceColumns(3, "f3-sb-42.lance", fSB) },
		pre:     []Precondition{CellsUnchanged(Offsets(3, 1), fSA)},
		want:    "accept",
	},
	{
		name:    "nested: rewriting the struct's own column (its validity) rejects a precondition on a child",
		history: func(h *hist) { h.replaceColumns(3, "f3-s-42.lance", fS) },
		pre:     []Precondition{CellsUnchanged(Offsets(3, 1), fSA)},
		want:    "reject\nprecondition 0 field 5 fragment 3: BaseDataReplaced rows [1] at version 42 by txn-42",
	},
	{
		name: "nested: a child added to a protected struct changes its values",
		history: func(h *hist) {
			h.schemaEdit(func(fs []*lancepb.Field) []*lancepb.Field {
				return append(fs, testField(7, fS, "c", "int8", true))
			})
		},
		pre:  []Precondition{CellsUnchanged(Offsets(3, 1), fS), CellsUnchanged(Offsets(3, 1), fSA)},
		want: "reject\nprecondition 0 field 4 fragment 3: SchemaChanged rows [1] at version 42 by txn-42",
	},
	{
		name: "nested: the parent of a protected child changes nullability",
		history: func(h *hist) {
			h.schemaEdit(func(fs []*lancepb.Field) []*lancepb.Field { fs[fS].Nullable = false; return fs })
		},
		pre:  []Precondition{CellsUnchanged(Offsets(3, 1), fSA)},
		want: "reject\nprecondition 0 field 5 fragment 3: SchemaChanged rows [1] at version 42 by txn-42",
	},

	// ── Fragments. ───────────────────────────────────────────────────────
	{
		name:    "compaction moving protected rows: reject (fragment removed; no remapping)",
		history: func(h *hist) { h.compact(10, 2, 3) },
		pre:     x3(17),
		want:    "reject\nprecondition 0 field 1 fragment 3: FragmentRemoved rows [17] at version 42 by txn-42",
	},
	{
		name:    "compaction of other fragments: accept",
		history: func(h *hist) { h.compact(10, 0, 1) },
		pre:     x3(17),
		want:    "accept",
	},
	{
		name:    "append of new fragments: accept",
		history: func(h *hist) { h.appendFragment(4); h.appendFragment(5) },
		pre:     []Precondition{CellsUnchanged(WholeFragments(0, 1, 2, 3), fX, fY)},
		want:    "accept",
	},
	{
		name: "another fragment under the same id (ids restarted by an Overwrite): reject",
		history: func(h *hist) {
			h.editFragment(3, func(pb *lancepb.DataFragment) { pb.PhysicalRows = 40 })
		},
		pre:  x3(17),
		want: "reject\nprecondition 0 field 1 fragment 3: FragmentRemoved rows [17] at version 42 by txn-42",
	},

	// ── Restore. ─────────────────────────────────────────────────────────
	{
		name: "Restore to the read version after a change: accept (the cells are as read)",
		history: func(h *hist) {
			h.replaceColumns(3, "f3-x-42.lance", fX)
			h.restore(41)
		},
		pre:  x3(17),
		want: "accept",
	},
	{
		name: "Restore to a version before the read version undoes what was read: reject, blamed on the Restore",
		history: func(h *hist) {
			h.overlay(3, "ov-x-42.lance", []int32{fX}, 17)
			h.pin()
			h.restore(41)
		},
		pre:  x3(17, 18),
		want: "reject\nprecondition 0 field 1 fragment 3: OverlayChanged rows [17] at version 43 by txn-43",
	},
	{
		name: "blame names the first version that differs, even if a later one restored it",
		history: func(h *hist) {
			h.replaceColumns(3, "f3-x-42.lance", fX)
			h.restore(41)
			h.replaceColumns(3, "f3-x-44.lance", fX)
		},
		pre:  x3(17),
		want: "reject\nprecondition 0 field 1 fragment 3: BaseDataReplaced rows [17] at version 42 by txn-42",
	},

	// ── Several preconditions: every violation is named. ─────────────────
	{
		name: "every violation is listed, each blamed on its own version",
		history: func(h *hist) {
			h.replaceColumns(3, "f3-y-42.lance", fY)
			h.delete(1, 5)
			h.overlay(0, "ov-44.lance", []int32{fZ}, 3)
		},
		pre: []Precondition{
			CellsUnchanged(Union(Offsets(1, 5, 6), Offsets(3, 17)), fX),
			CellsUnchanged(WholeFragments(0, 3), fY, fZ),
		},
		want: "reject" +
			"\nprecondition 0 field 1 fragment 1: ProtectedRowsDeleted rows [5] at version 43 by txn-43" +
			"\nprecondition 1 field 3 fragment 0: OverlayChanged rows [3] at version 44 by txn-44" +
			"\nprecondition 1 field 2 fragment 3: BaseDataReplaced rows [0 1 2 3 4 5 6 7] at version 42 by txn-42",
	},
}

func TestScenarios(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			h := newHist(t)
			sc.history(h)
			opts := Options{Policy: sc.policy, Deletions: h.dv}
			if sc.deletions != nil {
				opts.Deletions = sc.deletions(h)
			}
			v, err := Evaluate(t.Context(), h.pinned(), h.head, sc.pre, opts)
			if err != nil {
				t.Fatal(err)
			}
			v = Blame(t.Context(), h.pinned(), h.steps, sc.pre, v, opts)
			if got := render(v); got != sc.want {
				t.Errorf("got:\n%s\nwant:\n%s\ndetails:\n%s", got, sc.want, v)
			}
			for _, x := range v.Violations {
				if x.Detail == "" {
					t.Errorf("violation without detail: %v", x)
				}
				if len(x.Rows) > MaxSampleRows {
					t.Errorf("%d sample rows", len(x.Rows))
				}
			}
			// The verdict does not depend on the policy's stricter/weaker
			// siblings in the wrong direction: Strict rejects at least
			// whatever ProtectedRows rejects, which rejects at least what
			// Ignore rejects.
			checkPolicyOrder(t, h, sc.pre)
		})
	}
}

// checkPolicyOrder checks that Strict ⊇ ProtectedRows ⊇ Ignore, cell group
// by cell group.
func checkPolicyOrder(t *testing.T, h *hist, pre []Precondition) {
	t.Helper()
	groups := func(p DeletionPolicy) map[[3]uint64]bool {
		v, err := Evaluate(t.Context(), h.pinned(), h.head, pre, Options{Policy: p, Deletions: h.dv})
		if err != nil {
			t.Fatal(err)
		}
		m := map[[3]uint64]bool{}
		for _, x := range v.Violations {
			m[[3]uint64{uint64(x.Precondition), uint64(x.FieldID), x.FragmentID}] = true
		}
		return m
	}
	strict, prot, ign := groups(Strict), groups(ProtectedRows), groups(Ignore)
	for g := range ign {
		if !prot[g] {
			t.Errorf("Ignore rejects %v but ProtectedRows does not", g)
		}
	}
	for g := range prot {
		if !strict[g] {
			t.Errorf("ProtectedRows rejects %v but Strict does not", g)
		}
	}
}

func TestDetails(t *testing.T) {
	h := newHist(t)
	h.replaceColumns(3, "f3-x-42.lance", fX)
	h.delete(2, 7)
	h.drop(fZ)
	pre := []Precondition{
		CellsUnchanged(Offsets(3, 17), fX),
		CellsUnchanged(Offsets(2, 7), fY),
		CellsUnchanged(Offsets(1, 1), fZ),
	}
	v, err := h.eval(pre, ProtectedRows)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"field 1: data file f3-idx.lance column 1 → f3-x-42.lance column 0",
		"deletion file none → 2-42-1001.arrow: 1 protected rows deleted, 0 restored",
		"field 3 (z) is not in the schema at version 44",
	}
	if len(v.Violations) != len(want) {
		t.Fatalf("got %v", v)
	}
	for i, w := range want {
		if !strings.Contains(v.Violations[i].Detail, w) {
			t.Errorf("violation %d detail %q, want it to contain %q", i, v.Violations[i].Detail, w)
		}
	}
	if s := v.String(); !strings.Contains(s, "at version 42 by txn-42") {
		t.Errorf("String() = %s", s)
	}
}

func TestEvaluateErrors(t *testing.T) {
	h := newHist(t)
	h.editFragment(3, func(pb *lancepb.DataFragment) {
		pb.Overlays = append(pb.Overlays, &lancepb.DataOverlayFile{
			DataFile:         dataFile("ov.lance", fX),
			Coverage:         &lancepb.DataOverlayFile_SharedOffsetBitmap{SharedOffsetBitmap: []byte("garbage")},
			CommittedVersion: 42,
		})
	})
	if _, err := Evaluate(t.Context(), h.pinned(), h.head, x3(1), Options{}); !errors.Is(err, ErrMalformedManifest) {
		t.Errorf("malformed overlay coverage: err = %v, want ErrMalformedManifest", err)
	}
	h.editFragment(2, func(pb *lancepb.DataFragment) {
		pb.Overlays = append(pb.Overlays, &lancepb.DataOverlayFile{DataFile: dataFile("ov.lance", fX), CommittedVersion: 43})
	})
	pre := []Precondition{CellsUnchanged(Offsets(2, 1), fX)}
	if _, err := Evaluate(t.Context(), h.pinned(), h.head, pre, Options{}); !errors.Is(err, ErrMalformedManifest) {
		t.Errorf("overlay without coverage: err = %v, want ErrMalformedManifest", err)
	}
	if _, err := Evaluate(t.Context(), nil, h.head, pre, Options{}); err == nil {
		t.Error("nil pinned manifest: no error")
	}
	if _, err := Evaluate(t.Context(), h.pinned(), h.head, pre, Options{Policy: 9}); err == nil {
		t.Error("unknown policy: no error")
	}
	// Evaluate validates against pinned on its own.
	for _, p := range []Precondition{
		CellsUnchanged(Offsets(9, 1), fX),
		CellsUnchanged(Offsets(3, 100), fX),
		CellsUnchanged(Offsets(3, 1), 99),
		CellsUnchanged(Offsets(3, 1), -1),
		CellsUnchanged(Offsets(3, 1)),
		CellsUnchanged(RowSelection{}, fX),
	} {
		_, err := Evaluate(t.Context(), h.pinned(), h.head, []Precondition{p}, Options{})
		var inv *InvalidError
		if !errors.As(err, &inv) || !errors.Is(err, ErrInvalidPrecondition) {
			t.Errorf("%v × %v: err = %v, want *InvalidError", p.Fields, p.Rows, err)
		}
	}
}

// TestAcceptZeroValue: a Verdict nobody filled in is not an acceptance.
func TestAcceptZeroValue(t *testing.T) {
	if (Verdict{}).Accepted() {
		t.Fatal("zero Verdict accepted")
	}
}

// TestDeletionVectorsOnlyWhenNeeded: deletion vectors are read only for
// protected fragments whose deletion file changed.
func TestDeletionVectorsOnlyWhenNeeded(t *testing.T) {
	h := newHist(t)
	h.delete(1, 3)
	h.replaceColumns(3, "f3-y.lance", fY)
	c := &countingDV{dv: h.dv}
	v, err := Evaluate(t.Context(), h.pinned(), h.head, x3(1, 2), Options{Deletions: c})
	if err != nil || !v.Accepted() {
		t.Fatalf("%v %v", v, err)
	}
	if c.n != 0 {
		t.Errorf("%d deletion vector reads, want 0", c.n)
	}
	v, err = Evaluate(t.Context(), h.pinned(), h.head, []Precondition{CellsUnchanged(Offsets(1, 2), fX)}, Options{Deletions: c})
	if err != nil || !v.Accepted() {
		t.Fatalf("%v %v", v, err)
	}
	if c.n != 1 {
		t.Errorf("%d deletion vector reads, want 1 (fragment 1 at head; none at the read version)", c.n)
	}
}

type countingDV struct {
	dv table.DeletionVectors
	n  int
}

func (c *countingDV) DeletionVector(ctx context.Context, frag uint64, df *lancepb.DeletionFile) (*roaring.Bitmap, error) {
	c.n++
	return c.dv.DeletionVector(ctx, frag, df)
}
