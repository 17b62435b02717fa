package events

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"cellguard/table"
)

// Summary says what one version changed, found by comparing its manifest
// with the previous one.
type Summary struct {
	// FragmentsAdded, FragmentsRemoved and FragmentsUpdated are fragment
	// ids, ascending. Updated fragments exist in both versions and differ.
	FragmentsAdded   []uint64
	FragmentsRemoved []uint64
	FragmentsUpdated []uint64
	// Written lists, per fragment, the field ids whose values the version
	// wrote: fields of new data files and new overlay files, and every
	// field of an added fragment. Tombstones are left out.
	Written map[uint64][]int32
	// RowsAdded counts the live rows of added fragments; RowsDeleted the
	// rows newly marked deleted plus the live rows of removed fragments.
	RowsAdded   uint64
	RowsDeleted uint64
	// SchemaChanged reports a change of the fields (added, dropped, retyped).
	SchemaChanged bool
}

// Fields returns every field id written, ascending.
func (s Summary) Fields() []int32 {
	set := map[int32]bool{}
	for _, ids := range s.Written {
		for _, id := range ids {
			set[id] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// Wrote reports whether the version wrote field id in fragment frag.
func (s Summary) Wrote(frag uint64, id int32) bool {
	return slices.Contains(s.Written[frag], id)
}

// FragmentsWriting returns the fragments where the version wrote any of
// fields, ascending: what a worker deriving from those fields recomputes.
func (s Summary) FragmentsWriting(fields ...int32) []uint64 {
	var out []uint64
	for frag, ids := range s.Written {
		if slices.ContainsFunc(ids, func(id int32) bool { return slices.Contains(fields, id) }) {
			out = append(out, frag)
		}
	}
	slices.Sort(out)
	return out
}

// String renders the summary on one line.
func (s Summary) String() string {
	var parts []string
	if n := len(s.FragmentsAdded); n > 0 {
		parts = append(parts, fmt.Sprintf("+%d fragment(s)", n))
	}
	if n := len(s.FragmentsRemoved); n > 0 {
		parts = append(parts, fmt.Sprintf("-%d fragment(s)", n))
	}
	if n := len(s.FragmentsUpdated); n > 0 {
		parts = append(parts, fmt.Sprintf("~%d fragment(s) %v", n, ids(s.FragmentsUpdated)))
	}
	if f := s.Fields(); len(f) > 0 {
		parts = append(parts, fmt.Sprintf("fields %v", f))
	}
	if s.RowsAdded > 0 {
		parts = append(parts, fmt.Sprintf("+%d rows", s.RowsAdded))
	}
	if s.RowsDeleted > 0 {
		parts = append(parts, fmt.Sprintf("-%d rows", s.RowsDeleted))
	}
	if s.SchemaChanged {
		parts = append(parts, "schema changed")
	}
	if len(parts) == 0 {
		return "no data change"
	}
	return strings.Join(parts, ", ")
}

func ids(v []uint64) string {
	const max = 8
	if len(v) <= max {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(fmt.Sprint(v[:max]), "]") + " …]"
}

// Summarize compares version next with prev (nil before the first
// version). Fragments shared between the two manifests are skipped
// cheaply: versions share every fragment they do not change.
func Summarize(prev, next *table.Manifest) Summary {
	s := Summary{Written: map[uint64][]int32{}}
	if prev == nil {
		for f := range next.Fragments() {
			s.added(f)
		}
		s.SchemaChanged = true
		return s
	}
	s.SchemaChanged = !sameSchema(prev.Schema(), next.Schema())
	for f := range next.Fragments() {
		old, ok := prev.Fragment(f.ID())
		switch {
		case !ok:
			s.added(f)
		case old != f:
			if s.updated(old, f) {
				s.FragmentsUpdated = append(s.FragmentsUpdated, f.ID())
			}
		}
	}
	for f := range prev.Fragments() {
		if _, ok := next.Fragment(f.ID()); !ok {
			s.FragmentsRemoved = append(s.FragmentsRemoved, f.ID())
			s.RowsDeleted += f.LiveRows()
		}
	}
	slices.Sort(s.FragmentsAdded)
	slices.Sort(s.FragmentsUpdated)
	slices.Sort(s.FragmentsRemoved)
	return s
}

func (s *Summary) added(f *table.Fragment) {
	s.FragmentsAdded = append(s.FragmentsAdded, f.ID())
	s.RowsAdded += f.LiveRows()
	var fields []int32
	for _, df := range f.Files() {
		fields = appendLive(fields, df.GetFields())
	}
	for _, ov := range f.Overlays() {
		fields = appendLive(fields, ov.GetDataFile().GetFields())
	}
	s.write(f.ID(), fields)
}

// updated records what changed between two versions of one fragment and
// reports whether anything did.
func (s *Summary) updated(old, f *table.Fragment) bool {
	changed := false
	oldFiles := map[string]bool{}
	for _, df := range old.Files() {
		oldFiles[df.GetPath()] = true
	}
	var fields []int32
	for _, df := range f.Files() {
		if !oldFiles[df.GetPath()] {
			fields = appendLive(fields, df.GetFields())
			changed = true
		}
	}
	oldOverlays := map[string]bool{}
	for _, ov := range old.Overlays() {
		oldOverlays[ov.GetDataFile().GetPath()] = true
	}
	for _, ov := range f.Overlays() {
		if !oldOverlays[ov.GetDataFile().GetPath()] {
			fields = appendLive(fields, ov.GetDataFile().GetFields())
			changed = true
		}
	}
	s.write(f.ID(), fields)
	before, after := old.PhysicalRows()-old.LiveRows(), f.PhysicalRows()-f.LiveRows()
	if after > before {
		s.RowsDeleted += after - before
	}
	if before != after || len(old.Files()) != len(f.Files()) || len(old.Overlays()) != len(f.Overlays()) ||
		old.DeletionFile().GetId() != f.DeletionFile().GetId() {
		changed = true
	}
	return changed || !proto.Equal(old.Proto(), f.Proto())
}

func (s *Summary) write(frag uint64, fields []int32) {
	if len(fields) == 0 {
		return
	}
	slices.Sort(fields)
	s.Written[frag] = slices.Compact(fields)
}

func appendLive(dst, ids []int32) []int32 {
	for _, id := range ids {
		if id >= 0 {
			dst = append(dst, id)
		}
	}
	return dst
}

func sameSchema(a, b *table.Schema) bool {
	if a == b {
		return true
	}
	if a.Len() != b.Len() {
		return false
	}
	for _, f := range a.Fields() {
		g, ok := b.Field(f.GetId())
		if !ok || g.GetName() != f.GetName() || !a.SameType(b, f.GetId()) {
			return false
		}
	}
	return true
}
