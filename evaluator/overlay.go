package evaluator

import (
	"bytes"
	"fmt"
	"math"

	"github.com/RoaringBitmap/roaring/v2"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// How overlays decide a cell (Lance format A.8): walking a fragment's
// overlays newest first (higher committed_version, then later in the list),
// the first whose coverage of the field contains the offset supplies the
// value, stored at position rank(offset) of that coverage in the overlay
// file's column for the field; otherwise the base file does.
//
// So the value of (f, r) for every protected r is fixed by the overlays
// whose f-coverage intersects R, in order, each with its file, committed
// version, column and f-coverage up to the last protected row (which fixes
// coverage ∩ R and the rank of every protected offset). Overlays that miss
// R, other fields' coverage, and coverage past the last protected row may
// change freely.

// ovEntry is one (overlay, position of the field in its data file).
type ovEntry struct {
	ov  *lancepb.DataOverlayFile
	pos int
}

// ovIter yields the entries of one field in a fragment's overlays, oldest first.
type ovIter struct {
	ovs    []*lancepb.DataOverlayFile
	oi, k  int
	g      int32
	fragID uint64
}

func (it *ovIter) next() (ovEntry, bool) {
	for ; it.oi < len(it.ovs); it.oi, it.k = it.oi+1, 0 {
		fields := it.ovs[it.oi].GetDataFile().GetFields()
		for ; it.k < len(fields); it.k++ {
			if fields[it.k] == it.g {
				e := ovEntry{ov: it.ovs[it.oi], pos: it.k}
				it.k++
				return e, true
			}
		}
	}
	return ovEntry{}, false
}

// coverage returns the encoded coverage of e's field.
func (e ovEntry) coverage() ([]byte, bool) {
	switch c := e.ov.GetCoverage().(type) {
	case *lancepb.DataOverlayFile_SharedOffsetBitmap:
		return c.SharedOffsetBitmap, true
	case *lancepb.DataOverlayFile_FieldCoverage:
		bms := c.FieldCoverage.GetOffsetBitmaps()
		if len(bms) != len(e.ov.GetDataFile().GetFields()) {
			return nil, false
		}
		return bms[e.pos], true
	}
	return nil, false
}

func (e ovEntry) column() int32 {
	if ci := e.ov.GetDataFile().GetColumnIndices(); e.pos < len(ci) {
		return ci[e.pos]
	}
	return -1
}

// sameFile reports whether two entries read the same overlay column with
// the same effective version.
func (ev *evaluation) sameFile(a, b ovEntry) bool {
	da, db := a.ov.GetDataFile(), b.ov.GetDataFile()
	if da.GetPath() != db.GetPath() || (da.BaseId == nil) != (db.BaseId == nil) || da.GetBaseId() != db.GetBaseId() ||
		a.ov.GetCommittedVersion() != b.ov.GetCommittedVersion() || a.pos != b.pos || a.column() != b.column() {
		return false
	}
	return da.BaseId == nil || ev.sameBasePath(da.GetBaseId())
}

func (e ovEntry) String() string {
	return fmt.Sprintf("overlay %s (committed at version %d)", e.ov.GetDataFile().GetPath(), e.ov.GetCommittedVersion())
}

// overlays compares the overlays of field g (declared field f or one of its
// relatives) at the protected rows.
func (ev *evaluation) overlays(fp, fh *table.Fragment, fr fragRows, f, g int32) (finding, error) {
	if len(fp.Overlays()) == 0 && len(fh.Overlays()) == 0 {
		return finding{}, nil
	}
	// Fast path, no decoding: the same entries with the same coverage bytes.
	a := ovIter{ovs: fp.Overlays(), g: g}
	b := ovIter{ovs: fh.Overlays(), g: g}
	for {
		ea, okA := a.next()
		eb, okB := b.next()
		if !okA && !okB {
			return finding{}, nil
		}
		if okA != okB {
			break
		}
		if ea.ov == eb.ov && ea.pos == eb.pos {
			continue
		}
		ca, okA := ea.coverage()
		cb, okB := eb.coverage()
		if !okA || !okB || !ev.sameFile(ea, eb) || !bytes.Equal(ca, cb) {
			break
		}
	}
	// Slow path: decode coverage, keep what touches R, compare in order.
	n := fp.PhysicalRows()
	if n == 0 {
		return finding{}, nil
	}
	last := uint64(n - 1)
	if fr.rows != nil {
		last = uint64(fr.rows.Maximum())
	}
	la, err := protectedEntries(fp, g, fr, n)
	if err != nil {
		return finding{}, err
	}
	lb, err := protectedEntries(fh, g, fr, n)
	if err != nil {
		return finding{}, err
	}
	for k := 0; k < len(la) || k < len(lb); k++ {
		var why string
		switch {
		case k >= len(la):
			why = lb[k].String() + " covers protected rows"
		case k >= len(lb):
			why = la[k].String() + " no longer covers protected rows"
		case !ev.sameFile(la[k].ovEntry, lb[k].ovEntry):
			why = la[k].String() + " replaced by " + lb[k].String()
		case !sameUpTo(la[k].cov, lb[k].cov, last):
			why = la[k].String() + " coverage changed at or below protected rows"
		default:
			continue
		}
		return finding{
			reason: OverlayChanged,
			detail: ev.fieldLabel(f, g) + why,
			rows:   overlaySample(la[min(k, len(la)):], lb[min(k, len(lb)):], fr, n),
		}, nil
	}
	return finding{}, nil
}

// covEntry is an overlay entry with its decoded coverage.
type covEntry struct {
	ovEntry
	cov *roaring.Bitmap
}

// protectedEntries returns the entries of field g whose coverage intersects R.
func protectedEntries(frag *table.Fragment, g int32, fr fragRows, n uint64) ([]covEntry, error) {
	var out []covEntry
	it := ovIter{ovs: frag.Overlays(), g: g}
	for {
		e, ok := it.next()
		if !ok {
			return out, nil
		}
		raw, ok := e.coverage()
		if !ok {
			return nil, fmt.Errorf("evaluator: fragment %d, %s: no coverage for field %d: %w", frag.ID(), e, g, ErrMalformedManifest)
		}
		cov, err := table.DecodeBitmap(raw)
		if err != nil {
			return nil, fmt.Errorf("evaluator: fragment %d, %s: coverage of field %d: %w: %w", frag.ID(), e, g, ErrMalformedManifest, err)
		}
		if touches(cov, fr, n) {
			out = append(out, covEntry{ovEntry: e, cov: cov})
		}
	}
}

// touches reports whether cov ∩ R is not empty.
func touches(cov *roaring.Bitmap, fr fragRows, n uint64) bool {
	if fr.rows != nil {
		return cov.Intersects(fr.rows)
	}
	return !cov.IsEmpty() && uint64(cov.Minimum()) < n
}

// sameUpTo reports whether a and b agree on [0, last].
func sameUpTo(a, b *roaring.Bitmap, last uint64) bool {
	if a.Equals(b) {
		return true
	}
	if last >= math.MaxUint32 {
		return false
	}
	a, b = a.Clone(), b.Clone()
	a.RemoveRange(last+1, math.MaxUint32+1)
	b.RemoveRange(last+1, math.MaxUint32+1)
	return a.Equals(b)
}

// overlaySample returns protected rows covered by the differing entries.
func overlaySample(a, b []covEntry, fr fragRows, n uint64) []uint32 {
	u := roaring.New()
	for _, e := range a {
		u.Or(e.cov)
	}
	for _, e := range b {
		u.Or(e.cov)
	}
	if fr.rows != nil {
		u.And(fr.rows)
	} else if n <= math.MaxUint32 {
		u.RemoveRange(n, math.MaxUint32+1)
	}
	return firstN(u, MaxSampleRows)
}
