package table

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// Committed is one transaction committed after a read version, with the
// version it created.
type Committed struct {
	Version uint64
	Txn     *lancepb.Transaction
}

// RebaseInput is everything Rebase needs. Nothing in it is modified,
// except Txn with InPlace.
type RebaseInput struct {
	// Txn is the transaction being committed ("ours").
	Txn *lancepb.Transaction
	// Read is the manifest at Txn.read_version. It may be nil only when
	// read_version is 0 (a table-creating Overwrite) and the operation has
	// no fragment post-images.
	Read *Manifest
	// Head is the newest manifest: the one the rebased transaction applies
	// to.
	Head *Manifest
	// Committed holds every transaction committed after read_version, in
	// ascending version order: versions read_version+1 through
	// Head.Version(), one each.
	Committed []Committed
	// Deletions reads deletion files: ours' post-images, and the read and
	// head versions of the fragments whose deletion vectors are merged or
	// checked row by row. It may be nil when none is needed.
	Deletions DeletionVectors
	// Indexed says that Committed holds, ascending, only the versions a
	// ConflictIndex named for Txn (ConflictIndex.Candidates) rather than
	// every version after read_version: the others are Compatible with
	// Txn and touch none of its fragments, so Rebase has nothing to do
	// with them and the result is the same.
	Indexed bool
	// InPlace lets Rebase transform Txn itself instead of a copy, for a
	// caller that owns Txn and uses it afterwards only as Rebase returns
	// it. Txn is then changed even when the result is a conflict.
	InPlace bool
}

// NewDeletionFile is a deletion file the rebased transaction refers to and
// that does not exist yet: the committer writes Rows (as a portable roaring
// bitmap) at DeletionFilePath(FragmentID, File) before it commits.
type NewDeletionFile struct {
	FragmentID uint64
	File       *lancepb.DeletionFile
	Rows       *roaring.Bitmap
}

// RebaseResult is the outcome of a rebase: either a transaction to apply at
// the head, or the conflict that prevents it.
type RebaseResult struct {
	// Txn is ours, transformed to apply at Head, with read_version =
	// Head.Version(); nil when Conflict is set. It keeps uuid, tag,
	// preconditions and properties.
	Txn *lancepb.Transaction
	// Conflict is the first Retryable or Incompatible conflict, nil when
	// the rebase succeeded.
	Conflict *Conflict
	// NewDeletionFiles are the deletion files Txn refers to that the
	// committer must write first.
	NewDeletionFiles []NewDeletionFile
}

// Rebase transforms in.Txn so that it applies on in.Head, or finds why it
// cannot. It checks ours against each committed transaction in order with
// the rules of CheckConflict (and, having the schemas, relating nested
// fields to their ancestors) and stops at the first Retryable or
// Incompatible conflict, which it returns in the result: a conflict is an
// outcome, not an error. Errors are for malformed input and for failures
// of in.Deletions.
//
// What the rebase does beyond advancing read_version:
//
//   - Fragment post-images of a Delete or Update are rebuilt on the head's
//     fragment, never installed as written at the read version (Lance bugs
//     #9216, #9217; reference F.8): overlays, column files and Project
//     prunes that landed concurrently are kept, and ours contributes only
//     what it changed relative to the read version. The row-id and
//     version sequences are merged three ways the same way (both sides
//     changing one is a Retryable conflict).
//   - Deletion vectors changed on both sides are merged (reference D.4):
//     merged = head ∪ (ours − read). A fragment the merge deletes
//     completely moves to the removed ids; otherwise a new BITMAP deletion
//     file with read_version = Head.Version() and a deterministic id
//     (DeletionFileID) takes its place and is reported in
//     NewDeletionFiles.
//   - Rows ours deletes that were concurrently deleted are allowed when
//     every concurrent change of the fragment was a Delete: deleting a
//     deleted row changes nothing. Lance retries (#6149 proposes the
//     same relaxation). When a concurrent Update moved such a row, its
//     new copy would survive our delete: Retryable.
//   - An Update whose rewritten rows (the rows it deleted, plus its
//     updated_fragment_offset_bitmaps) were concurrently deleted or moved
//     is Retryable, naming sample offsets. A REWRITE_COLUMNS update
//     without offsets for a fragment counts as rewriting all of its rows.
//   - Field-disjoint column rewrites of one fragment (reference F.2) are
//     merged file by file: the head's files, with our rewritten fields
//     tombstoned in them and our new files appended. Any field changed on
//     both sides (or a nested field on one side and its ancestor on the
//     other) is Retryable.
//   - A CreateIndex drops from its indexes' fragment bitmaps the fragments
//     whose indexed fields a concurrent Update rewrote.
//   - Rows moved by a row-rewriting Update are checked against
//     concurrent overlay coverage, in both directions. For an overlay of
//     ours, moved rows are the head's deletions minus the read version's,
//     which also counts rows a concurrent Delete removed: an over-rejection
//     Lance shares, never a lost overlay.
func Rebase(ctx context.Context, in RebaseInput) (RebaseResult, error) {
	oursOp, err := checkRebaseInput(in)
	if err != nil {
		return RebaseResult{}, err
	}
	if len(in.Committed) == 0 && !finishes(oursOp) {
		// Nothing to check and nothing to rebuild: only the read version
		// moves.
		out := in.Txn
		if !in.InPlace {
			out = proto.CloneOf(out)
		}
		out.ReadVersion = in.Head.Version()
		return RebaseResult{Txn: out}, nil
	}
	r, err := newRebaser(in, oursOp)
	if err != nil {
		return RebaseResult{}, err
	}
	for i, c := range in.Committed {
		v, err := checkConflict(r.out, c.Txn, r.fields)
		if err != nil {
			return RebaseResult{}, withContext(err, "against version %d", c.Version)
		}
		v.TheirsVersion = c.Version
		switch v.Resolution {
		case Retryable, Incompatible:
			return RebaseResult{Conflict: &v}, nil
		case Rebasable:
			if err := r.absorb(i, v); err != nil {
				return RebaseResult{}, err
			}
		}
		r.note(i)
	}
	var conflict *Conflict
	switch r.oursOp {
	case OpDelete, OpUpdate:
		conflict, err = r.finishRowChange(ctx)
	case OpDataOverlay:
		conflict, err = r.finishOverlay(ctx)
	}
	if err != nil || conflict != nil {
		return RebaseResult{Conflict: conflict}, err
	}
	r.out.ReadVersion = in.Head.Version()
	return RebaseResult{Txn: r.out, NewDeletionFiles: r.newFiles}, nil
}

// DeletionFileID is the id Rebase gives the deletion file it writes for
// fragment fragmentID on behalf of transaction uuid: FNV-1a over both, so
// that recomputing a rebase after a crash names, and writes, the same
// file. The file's read_version (the head version) is part of its path, so
// rebases onto different heads never collide.
func DeletionFileID(uuid string, fragmentID uint64) uint64 {
	h := fnv.New64a()
	h.Write([]byte("cellguard deletion file\x00"))
	h.Write([]byte(uuid))
	var b [9]byte
	binary.LittleEndian.PutUint64(b[1:], fragmentID)
	h.Write(b[:])
	if id := h.Sum64(); id != 0 {
		return id
	}
	return 1
}

const rebaseOp = "rebase"

// rebaser carries one rebase.
type rebaser struct {
	in       RebaseInput
	out      *lancepb.Transaction // ours, being transformed; a private clone
	oursOp   Op
	ops      []Op // of in.Committed
	fields   fieldTree
	schemas  [2]*Schema // backs fields.schemas: read and head
	newFiles []NewDeletionFile

	lastTouch  map[uint64]int             // fragment → last committed txn that touched it
	updatedBy  map[uint64]bool            // fragment → some committed Update modified it
	coverage   map[uint64]*roaring.Bitmap // fragment → concurrent overlay coverage to keep away from our moved rows
	overlayChk fragSet                    // fragment of our overlay a concurrent Update moved rows out of
}

// checkRebaseInput checks in and returns the kind of ours.
func checkRebaseInput(in RebaseInput) (Op, error) {
	oursOp, err := supportedOp(rebaseOp, "ours", in.Txn)
	if err != nil {
		return oursOp, err
	}
	if in.Head == nil {
		return oursOp, errorf(rebaseOp, ErrMalformed, "no head manifest")
	}
	rv, head := in.Txn.GetReadVersion(), in.Head.Version()
	if in.Read == nil && rv != 0 {
		return oursOp, errorf(rebaseOp, ErrMalformed, "no manifest for read version %d", rv)
	}
	if in.Read != nil && in.Read.Version() != rv {
		return oursOp, errorf(rebaseOp, ErrMalformed, "read manifest is version %d, transaction read version is %d", in.Read.Version(), rv)
	}
	if head < rv {
		return oursOp, errorf(rebaseOp, ErrInvalidTransaction, "read version %d is ahead of head version %d", rv, head)
	}
	return oursOp, checkCommitted(in, rv, head)
}

// finishes reports the kinds of ours that Rebase checks or rebuilds
// against the head once the committed transactions are through.
func finishes(op Op) bool {
	return op == OpDelete || op == OpUpdate || op == OpDataOverlay
}

// newRebaser starts the rebase of in (checked), whose ours is of kind
// oursOp.
func newRebaser(in RebaseInput, oursOp Op) (*rebaser, error) {
	var err error
	r := &rebaser{in: in, out: in.Txn, oursOp: oursOp} // the maps are made when first written
	if len(in.Committed) > 0 {
		r.ops = make([]Op, len(in.Committed))
	}
	if !in.InPlace {
		r.out = proto.CloneOf(in.Txn)
	}
	for i, c := range in.Committed {
		if r.ops[i], err = OpOf(c.Txn); err != nil || !r.ops[i].Supported() {
			_, err = supportedOp(rebaseOp, fmt.Sprintf("version %d", c.Version), c.Txn)
			return nil, err
		}
	}
	r.fields.schemas = r.schemas[:0]
	if in.Read != nil {
		r.fields.schemas = append(r.fields.schemas, in.Read.Schema())
	}
	r.fields.schemas = append(r.fields.schemas, in.Head.Schema())
	return r, nil
}

// checkCommitted checks that in.Committed names versions rv+1 to head:
// every one of them in order, or with Indexed some of them, ascending.
func checkCommitted(in RebaseInput, rv, head uint64) error {
	if !in.Indexed && uint64(len(in.Committed)) != head-rv {
		return errorf(rebaseOp, ErrVersionNotFound, "%d committed transactions given for versions %d to %d", len(in.Committed), rv+1, head)
	}
	prev := rv
	for i, c := range in.Committed {
		ok := c.Version == prev+1
		if in.Indexed {
			ok = c.Version > prev && c.Version <= head
		}
		if !ok {
			return errorf(rebaseOp, ErrVersionNotFound, "committed transaction %d is version %d, after version %d (read version %d, head %d)", i, c.Version, prev, rv, head)
		}
		prev = c.Version
	}
	return nil
}

// note records which fragments committed transaction i touched, for
// attributing row-level conflicts found at the end.
func (r *rebaser) note(i int) {
	txn := r.in.Committed[i].Txn
	var ids []uint64
	switch r.ops[i] {
	case OpDelete, OpUpdate:
		rc := rowChangeOf(txn)
		ids = append(rc.updated, rc.removed...)
		if rc.update != nil {
			for _, id := range rc.updated {
				if r.updatedBy == nil {
					r.updatedBy = map[uint64]bool{}
				}
				r.updatedBy[id] = true
			}
		}
	case OpRewrite:
		ids = rewriteOldIDs(txn.GetRewrite())
	case OpDataReplacement:
		ids = replacementIDs(txn.GetDataReplacement())
	case OpDataOverlay:
		ids = overlayIDs(txn.GetDataOverlay())
	}
	for _, id := range ids {
		if r.lastTouch == nil {
			r.lastTouch = map[uint64]int{}
		}
		r.lastTouch[id] = i
	}
}

// absorb performs or schedules the transformation a Rebasable verdict
// against committed transaction i calls for.
func (r *rebaser) absorb(i int, v Conflict) error {
	theirs := r.in.Committed[i].Txn
	switch {
	case r.oursOp == OpCreateIndex && r.ops[i] == OpUpdate:
		return r.pruneIndexes(theirs)
	case r.oursOp == OpUpdate && r.ops[i] == OpDataOverlay:
		frags := newFragSet(v.Fragments)
		for _, g := range theirs.GetDataOverlay().GetGroups() {
			if !frags.has(g.GetFragmentId()) {
				continue
			}
			cov, err := overlayGroupCoverage(g)
			if err != nil {
				return withContext(err, "version %d", r.in.Committed[i].Version)
			}
			if r.coverage == nil {
				r.coverage = map[uint64]*roaring.Bitmap{}
			}
			if r.coverage[g.GetFragmentId()] == nil {
				r.coverage[g.GetFragmentId()] = roaring.New()
			}
			r.coverage[g.GetFragmentId()].Or(cov)
		}
	case r.oursOp == OpDataOverlay && r.ops[i] == OpUpdate:
		for _, id := range v.Fragments {
			if r.overlayChk == nil {
				r.overlayChk = fragSet{}
			}
			r.overlayChk[id] = struct{}{}
		}
	}
	// Delete/Update against Delete/Update/DataReplacement: the post-images
	// are merged with the head's fragments in finishRowChange.
	return nil
}

// pruneIndexes drops from ours' new indexes the fragments whose indexed
// fields theirs, an Update, rewrote.
func (r *rebaser) pruneIndexes(theirs *lancepb.Transaction) error {
	rc := rowChangeOf(theirs)
	modified := rc.fieldsModified()
	for _, idx := range r.out.GetCreateIndex().GetNewIndices() {
		if len(r.fields.overlap(indexDependsOn(idx), modified)) == 0 {
			continue
		}
		bm, present, err := indexFragments(idx)
		if err != nil || !present {
			return err // no bitmap: CheckConflict already retried
		}
		changed := false
		for _, id := range rc.updated {
			if id <= math.MaxUint32 && bm.CheckedRemove(uint32(id)) {
				changed = true
			}
		}
		if !changed {
			continue
		}
		b, err := bm.ToBytes()
		if err != nil {
			return errorf(rebaseOp, ErrMalformed, "encode fragment bitmap of index %q: %v", idx.GetName(), err)
		}
		idx.FragmentBitmap = b
	}
	return nil
}

// conflictOn builds a Retryable conflict about fragment id found while
// finishing, attributed to the last committed transaction that touched it.
func (r *rebaser) conflictOn(id uint64, format string, args ...any) *Conflict {
	c := &Conflict{
		Resolution: Retryable,
		Ours:       r.oursOp,
		Reason:     fmt.Sprintf(format, args...),
		Fragments:  []uint64{id},
	}
	if i, ok := r.lastTouch[id]; ok {
		c.Theirs = r.ops[i]
		c.TheirsVersion = r.in.Committed[i].Version
		c.TheirsUUID = r.in.Committed[i].Txn.GetUuid()
	}
	return c
}

// dv reads the deletion vector df records for fragment id; nil df means no
// deleted rows.
func (r *rebaser) dv(ctx context.Context, id uint64, df *lancepb.DeletionFile) (*roaring.Bitmap, error) {
	if df == nil {
		return roaring.New(), nil
	}
	if r.in.Deletions == nil {
		return nil, errorf(rebaseOp, ErrMalformed, "deletion vectors are needed for fragment %d but RebaseInput.Deletions is nil", id)
	}
	bm, err := r.in.Deletions.DeletionVector(ctx, id, df)
	if err != nil {
		return nil, err
	}
	if bm == nil {
		return nil, errorf(rebaseOp, ErrMalformed, "deletion vector %s is nil", DeletionFilePath(id, df))
	}
	return bm, nil
}

// fragments returns the read and head versions of fragment id; head is nil
// when the fragment is gone. A fragment missing at the read version is an
// error: ours cannot have been built on it.
func (r *rebaser) fragments(id uint64) (read, head *lancepb.DataFragment, err error) {
	if r.in.Read == nil {
		return nil, nil, errorf(rebaseOp, ErrMalformed, "no manifest for read version %d", r.in.Txn.GetReadVersion())
	}
	rf, ok := r.in.Read.Fragment(id)
	if !ok {
		return nil, nil, errorf(rebaseOp, ErrInvalidTransaction, "%s modifies fragment %d, which is not in read version %d", r.oursOp, id, r.in.Read.Version())
	}
	if hf, ok := r.in.Head.Fragment(id); ok {
		head = hf.Proto()
	}
	return rf.Proto(), head, nil
}

// finishOverlay checks, for each fragment of ours' overlay that a
// concurrent row-moving Update touched, that no moved row is covered
// (Lance's finish_data_overlay).
func (r *rebaser) finishOverlay(ctx context.Context) (*Conflict, error) {
	for _, g := range r.out.GetDataOverlay().GetGroups() {
		if _, ok := r.in.Head.Fragment(g.GetFragmentId()); !ok {
			return r.conflictOn(g.GetFragmentId(), "overlaid fragment %d no longer exists", g.GetFragmentId()), nil
		}
	}
	ids := fragSetIDs(r.overlayChk)
	slices.Sort(ids)
	for _, id := range ids {
		read, head, err := r.fragments(id)
		if err != nil {
			return nil, err
		}
		readRows, err := r.dv(ctx, id, read.GetDeletionFile())
		if err != nil {
			return nil, err
		}
		headRows, err := r.dv(ctx, id, head.GetDeletionFile())
		if err != nil {
			return nil, err
		}
		moved := roaring.AndNot(headRows, readRows)
		cov := roaring.New()
		for _, g := range r.out.GetDataOverlay().GetGroups() {
			if g.GetFragmentId() != id {
				continue
			}
			c, err := overlayGroupCoverage(g)
			if err != nil {
				return nil, err
			}
			cov.Or(c)
		}
		if x := roaring.And(moved, cov); !x.IsEmpty() {
			return r.conflictOn(id, "rows %v of fragment %d, which this overlay covers, were moved out by a concurrent Update", sampleOffsets(x), id), nil
		}
	}
	return nil, nil
}

// sampleOffsets returns up to five offsets of bm, for messages.
func sampleOffsets(bm *roaring.Bitmap) []uint32 {
	out := make([]uint32, 0, 5)
	it := bm.Iterator()
	for it.HasNext() && len(out) < 5 {
		out = append(out, it.Next())
	}
	return out
}
