package evaluator

// deletions.go judges a fragment's deletions under the deletion policies:
// which protected rows a changed deletion file deleted or brought back.

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/RoaringBitmap/roaring/v2"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// sameDeletionFile reports whether two deletion files are the same file.
// Deletion files are immutable and named by fragment, read version and id,
// so the same identity means the same contents.
func sameDeletionFile(a, b *lancepb.DeletionFile) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a == b || a.GetFileType() == b.GetFileType() && a.GetReadVersion() == b.GetReadVersion() &&
		a.GetId() == b.GetId() && a.GetNumDeletedRows() == b.GetNumDeletedRows() &&
		(a.BaseId == nil) == (b.BaseId == nil) && a.GetBaseId() == b.GetBaseId()
}

func deletionName(frag uint64, df *lancepb.DeletionFile) string {
	if df == nil {
		return "none"
	}
	return table.DeletionFilePath(frag, df)
}

// deletions applies the deletion policy to a fragment present in both
// manifests.
func (ev *evaluation) deletions(ctx context.Context, fp, fh *table.Fragment, fr fragRows) finding {
	dfP, dfH := fp.DeletionFile(), fh.DeletionFile()
	if ev.opts.Policy == Ignore ||
		sameDeletionFile(dfP, dfH) && (dfP == nil || dfP.BaseId == nil || ev.sameBasePath(dfP.GetBaseId())) {
		return finding{}
	}
	change := func() string {
		return "deletion file " + deletionName(fp.ID(), dfP) + " → " + deletionName(fh.ID(), dfH)
	}
	n := fp.PhysicalRows()
	if ev.opts.Deletions == nil {
		if ev.opts.Policy == Strict {
			return finding{reason: DeletionsChanged, detail: change()}
		}
		return finding{reason: DeletionsChanged, detail: change() + "; no deletion vector reader, so the change counts"}
	}
	dvP, errP := readDV(ctx, ev.opts.Deletions, fp)
	dvH, errH := readDV(ctx, ev.opts.Deletions, fh)
	if errP != nil || errH != nil {
		if ev.opts.Policy == Strict {
			return finding{reason: DeletionsChanged, detail: change()}
		}
		return finding{reason: DeletionsChanged, detail: change() + "; deletion vectors unreadable, so the change counts: " + errors.Join(errP, errH).Error()}
	}
	if !dvDiffers(dvP, dvH, fr, n) {
		if ev.opts.Policy == Strict {
			return finding{reason: DeletionsChanged, detail: change() + "; no protected row changed"}
		}
		return finding{}
	}
	diff := protectedDiff(dvP, dvH, fr, n)
	deleted := roaring.AndNot(diff, orEmpty(dvP)).GetCardinality()
	restored := diff.GetCardinality() - deleted
	detail := fmt.Sprintf("%s: %d protected rows deleted, %d restored", change(), deleted, restored)
	reason := ProtectedRowsDeleted
	if ev.opts.Policy == Strict {
		reason = DeletionsChanged
	}
	return finding{reason: reason, detail: detail, rows: firstN(diff, MaxSampleRows)}
}

// readDV returns the deleted offsets of f, nil when it has no deletion file.
func readDV(ctx context.Context, dv table.DeletionVectors, f *table.Fragment) (*roaring.Bitmap, error) {
	df := f.DeletionFile()
	if df == nil {
		return nil, nil
	}
	bm, err := dv.DeletionVector(ctx, f.ID(), df)
	if err == nil && bm == nil {
		err = fmt.Errorf("no deletion vector for %s", table.DeletionFilePath(f.ID(), df))
	}
	return bm, err
}

func orEmpty(bm *roaring.Bitmap) *roaring.Bitmap {
	if bm == nil {
		return roaring.New()
	}
	return bm
}

// inRows returns |x ∩ R| for a fragment of n physical rows; nil x is empty.
func inRows(x *roaring.Bitmap, fr fragRows, n uint64) uint64 {
	switch {
	case x == nil || n == 0:
		return 0
	case fr.rows != nil:
		return x.AndCardinality(fr.rows)
	case n > math.MaxUint32:
		return x.GetCardinality()
	}
	return x.Rank(uint32(n - 1))
}

// dvDiffers reports whether a ∩ R ≠ b ∩ R, allocating only when neither
// vector contains the other (deletions normally only grow).
func dvDiffers(a, b *roaring.Bitmap, fr fragRows, n uint64) bool {
	ca, cb := inRows(a, fr, n), inRows(b, fr, n)
	switch {
	case ca != cb:
		return true
	case ca == 0:
		return false
	case a.AndCardinality(b) == a.GetCardinality(), a.AndCardinality(b) == b.GetCardinality():
		// One contains the other and both hold as many protected rows.
		return false
	}
	return inRows(roaring.Xor(a, b), fr, n) != 0
}

// protectedDiff returns (a xor b) ∩ R.
func protectedDiff(a, b *roaring.Bitmap, fr fragRows, n uint64) *roaring.Bitmap {
	x := roaring.Xor(orEmpty(a), orEmpty(b))
	if fr.rows != nil {
		x.And(fr.rows)
	} else if n <= math.MaxUint32 {
		x.RemoveRange(n, math.MaxUint32+1)
	}
	return x
}
