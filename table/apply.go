package table

import (
	"context"
	"errors"
	"maps"
	"math"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// Apply builds the manifest of version head+1 from the manifest at head and
// a transaction, as Lance's `Transaction::build_manifest` does when it
// commits. The transaction is taken as already checked against everything
// committed since its read version (conflict resolution and rebase happen
// before Apply); Apply checks that it makes sense at head and returns a
// *Error wrapping ErrInvalidTransaction when it does not, or
// ErrUnsupportedOperation for operations cellguard does not carry out
// (UpdateMemWalState, AppendFragmentReuseTransitions, Clone, none, unknown).
//
// head == nil means the table does not exist yet: Apply is then Create.
// older serves the manifests of earlier versions; only Restore needs it (and
// ctx, which bounds that lookup), and it may be nil when no Restore can be
// served (Restore then fails with ErrVersionNotFound).
//
// Apply is a pure function of its arguments. It never modifies head, txn or
// anything they point to, shares with head every fragment the transaction
// does not touch, and costs time proportional to what the transaction names,
// not to the size of the table (Project, Merge and Overwrite are the
// exceptions: they rewrite the fragment list; Restore shares the restored
// version's).
//
// What Apply sets and leaves:
//   - version = head+1, tag = the transaction's tag (as Lance does);
//   - timestamp, writer_version, transaction_file, transaction_section,
//     index_section and version_aux_data are cleared: the committer stamps
//     them when it writes the manifest file (the index list itself is
//     Indices, written as the file's index section);
//   - max_fragment_id, next_row_id, reader/writer feature flags, schema,
//     schema metadata, config, table metadata and base paths follow Lance.
//
// # Deltas, not post-images
//
// Delete and Update carry post-images of the fragments they change (full
// DataFragment messages, built at the read version). Lance installs them
// whole, which silently undoes anything committed to those fragments after
// the read version that conflict resolution let through: an overlay, a
// column rewrite, a Project that pruned a data file (Lance issues #9216 and
// #9217). Apply instead applies them as deltas to the fragment at head,
// taking from the post-image only what the operation owns:
//
//   - Delete: the deletion file. Everything else comes from head.
//   - Update, REWRITE_ROWS: the deletion file. The rows it rewrites go to
//     new fragments; it writes no data file into an existing one.
//   - Update, REWRITE_COLUMNS: the data files the post-image adds, i.e.
//     files not at head whose live fields are all in fields_modified. Those
//     fields are tombstoned (-2) in head's other files (a file left with
//     nothing but tombstones is dropped, as Lance drops it) and in the
//     fragment's overlays committed at or before the read version (an
//     overlay committed later is newer than the update and stays in force).
//     The deletion file stays head's: an in-place column rewrite deletes
//     nothing.
//
// Other files of a post-image that head does not have are stale copies of
// files a concurrent commit changed: pruned by a Project, or given a new
// path by a DataReplacement. They are not brought back.
//
// When the fragment at head is the fragment at the read version (no
// concurrent change), this gives exactly the post-image, i.e. Lance's result.
//
// # Fidelity
//
// Replaying the Lance 8.0.0 fixture histories (replay_test.go) reproduces
// every Manifest field but the stamped ones above, byte for byte, stable row
// id sequences and version sequences included. Where Apply knowingly differs
// from Lance, or cannot know what Lance knows:
//
//   - Write parameters are not in the transaction: whether a new table has
//     stable row ids and, for a table created without data files, its data
//     storage format (see CreateOptions); on an existing table an Overwrite
//     keeps the storage format (Lance can switch it on request);
//     transaction-file writes disabled (flag 32) is carried from head.
//   - The index section (Manifest.Indices) follows Lance 8 or Lance 12
//     (IndexRules, from the writer of the manifest the table started
//     from; apply_indices.go). Lance's commit-time repair of index
//     coverage, which opens the index files (migrate_indices), is not
//     carried out: a new index without a fragment bitmap, or one whose
//     fragments a live segment of the same name covers already, is
//     refused. DataReplacement, DataOverlay and a Merge that rewrites an
//     indexed column's file take the rewritten fragments out of the
//     indices on those columns (Lance 8 leaves them to the conflict
//     check). Rewrite's fragment-reuse index is not on the wire and is
//     never added. Feature flags from 128 up are carried from head.
//   - Delete and Update post-images are applied as deltas (above); Lance
//     installs them whole.
//   - Restore does not move next_row_id back (Lance restores the old
//     counter and would hand out stable row ids again).
//   - UpdateBases refuses a base whose explicit id is taken (Lance replaces
//     the registered base); base paths keep their order, where Lance's
//     follows a hash map.
//   - Fragment ids restart at 0 on Overwrite, as in Lance 8.0.0, which wrote
//     the fixtures; Lance's 2026 main branch continues from the high-water
//     mark instead.
//   - An in-place column Update tombstones the rewritten fields only in
//     overlays committed at or before its read version (Lance: in all of
//     them; the two differ only where conflict resolution rejects anyway).
//   - Not carried out: Lance's repairs of manifests written by old releases
//     (fix_schema, migrate_manifest), the 2026 checks of reserved schema
//     metadata keys (unenforced primary and clustering keys) and of the
//     `lance.overlays.enabled` setting, and external (non-inline) row id
//     sequences in new fragments, which are refused.
//   - Stable row ids: Lance looks up the created-at version of a row an
//     Update moved in every fragment of the table; Apply only in the
//     fragments the Update removed or changed, where the row must come from
//     (same result, cost independent of table size). Like Lance, a
//     DataOverlay does not stamp last-updated versions (Lance #9078).
//   - Limits Lance does not have: a new fragment whose row ids must be
//     re-encoded (it arrives with only some) may have at most
//     maxMaterializedRows rows; fragment ids must fit max_fragment_id's 32
//     bits (Lance would panic).
func Apply(ctx context.Context, head *Manifest, txn *lancepb.Transaction, older Versions) (*Manifest, error) {
	return apply(ctx, head, txn, older, nil)
}

// apply is Apply; raw, if set, is the encoding with id 0 of the only
// fragment of txn, an Append (see Decoder.Apply).
func apply(ctx context.Context, head *Manifest, txn *lancepb.Transaction, older Versions, raw []byte) (*Manifest, error) {
	if head == nil {
		return Create(txn)
	}
	if txn == nil {
		return nil, errorf("apply transaction", ErrInvalidTransaction, "no transaction")
	}
	op, err := OpOf(txn)
	if err != nil {
		return nil, err
	}
	if !op.Supported() {
		return nil, errorf("apply "+op.String(), ErrUnsupportedOperation, "%s is not supported", op)
	}
	var a applier
	if err := a.init(head, txn, op); err != nil {
		return nil, err
	}
	a.raw = raw
	if err := a.apply(ctx, older); err != nil {
		return nil, err
	}
	if err := a.applyIndices(); err != nil {
		return nil, err
	}
	return a.finish()
}

// Versions serves the manifests of earlier versions of a table.
type Versions interface {
	// Manifest returns the manifest of the given version. An error wrapping
	// ErrVersionNotFound means the version does not exist or is no longer
	// available.
	Manifest(ctx context.Context, version uint64) (*Manifest, error)
}

// CreateOptions carries what creating a table needs beyond the creating
// transaction. Lance takes these from write parameters, not from the
// transaction, so they cannot be recovered from it.
type CreateOptions struct {
	// StableRowIDs creates the table with stable row ids (feature flag 2).
	StableRowIDs bool
	// DataFormat is the data storage format recorded when no data file tells
	// it (a table created empty). Nil means Lance 8's default, lance 2.1.
	DataFormat *lancepb.Manifest_DataStorageFormat
	// RequireFormat makes DataFormat binding: data files of another
	// version make the creation invalid (a table never mixes versions,
	// and the dataset's declared version is the one its files have).
	RequireFormat bool
}

// Create builds version 1 of a new table from its creating transaction: an
// Overwrite with read_version 0. Apply(ctx, nil, txn, nil) is the same call.
func Create(txn *lancepb.Transaction) (*Manifest, error) {
	return CreateWith(txn, CreateOptions{})
}

// CreateWith is Create with options.
func CreateWith(txn *lancepb.Transaction, opts CreateOptions) (*Manifest, error) {
	const opName = "create table"
	if txn == nil {
		return nil, errorf(opName, ErrInvalidTransaction, "no transaction")
	}
	op, err := OpOf(txn)
	if err != nil {
		return nil, err
	}
	switch {
	case op == OpOverwrite:
	case !op.Supported():
		return nil, errorf(opName, ErrUnsupportedOperation, "%s is not supported", op)
	default:
		return nil, errorf(opName, ErrInvalidTransaction, "a table is created by an Overwrite, not by %s", op)
	}
	if txn.GetReadVersion() != 0 {
		return nil, errorf(opName, ErrInvalidTransaction, "creating transaction has read_version %d, want 0", txn.GetReadVersion())
	}
	empty := &Manifest{header: &lancepb.Manifest{}, schema: &Schema{byID: map[int32]*lancepb.Field{}}}
	var a applier
	if err := a.init(empty, txn, op); err != nil {
		return nil, err
	}
	a.creating = true
	a.stable = opts.StableRowIDs
	a.defaultFormat = opts.DataFormat
	if err := a.applyOverwrite(txn.GetOverwrite()); err != nil {
		return nil, err
	}
	if want := opts.DataFormat; opts.RequireFormat && want != nil {
		if got := a.b.Header().DataFormat; got.GetVersion() != want.GetVersion() || got.GetFileFormat() != want.GetFileFormat() {
			return nil, a.invalid("data files are Lance file version %s, but the table is created with data storage version %s", got.GetVersion(), want.GetVersion())
		}
	}
	return a.finish()
}

// Feature flags (Manifest.reader_feature_flags and writer_feature_flags).
const (
	FlagDeletionFiles      uint64 = 1
	FlagStableRowIDs       uint64 = 2
	FlagV2FormatDeprecated uint64 = 4
	FlagTableConfig        uint64 = 8
	FlagBasePaths          uint64 = 16
	FlagInlineTransaction  uint64 = 32 // transaction-file writes disabled
	FlagDataOverlays       uint64 = 64
)

// detachedVersion is Lance's DETACHED_VERSION_MASK: versions with the high
// bit set are detached and never follow a main-line version.
const detachedVersion = uint64(1) << 63

// applier holds the state of one Apply call.
type applier struct {
	head    *Manifest
	txn     *lancepb.Transaction
	kind    Op
	b       Builder
	version uint64 // the version being built

	nextID        uint64 // next fragment id to assign to a fragment that arrives with id 0
	stable        bool   // the table uses stable row ids
	nextRowID     uint64 // next stable row id, when stable
	reserve       uint32 // ReserveFragments: how many ids to reserve
	restored      bool   // Restore: the builder holds an older manifest's content
	creating      bool   // Create: head is an empty stand-in
	defaultFormat *lancepb.Manifest_DataStorageFormat
	raw           []byte // an Append's only fragment as staged, canonical with id 0 (Decoder.Apply); nil if unknown
}

// init starts a, a zero applier, on head.
func (a *applier) init(head *Manifest, txn *lancepb.Transaction, op Op) error {
	*a = applier{head: head, txn: txn, kind: op, b: head.edit()}
	if head.Version() >= detachedVersion-1 {
		return a.errf(ErrInvalidTransaction, "version %d has no main-line successor", head.Version())
	}
	a.version = head.Version() + 1
	if id, ok := head.MaxFragmentID(); ok {
		a.nextID = uint64(id) + 1
	} else if id, ok := head.maxListedID(); ok {
		a.nextID = id + 1
	}
	if head.top.reader&FlagStableRowIDs != 0 {
		a.stable = true
		a.nextRowID = head.top.nextRowID
	}
	return nil
}

func (a *applier) errf(sentinel error, format string, args ...any) error {
	return errorf("apply "+a.kind.String(), sentinel, format, args...)
}

func (a *applier) invalid(format string, args ...any) error {
	return a.errf(ErrInvalidTransaction, format, args...)
}

func (a *applier) apply(ctx context.Context, older Versions) error {
	switch op := a.txn.GetOperation().(type) {
	case *lancepb.Transaction_Append_:
		return a.applyAppend(op.Append)
	case *lancepb.Transaction_Delete_:
		return a.applyDelete(op.Delete)
	case *lancepb.Transaction_Overwrite_:
		return a.applyOverwrite(op.Overwrite)
	case *lancepb.Transaction_CreateIndex_:
		return a.applyCreateIndex(op.CreateIndex)
	case *lancepb.Transaction_Rewrite_:
		return a.applyRewrite(op.Rewrite)
	case *lancepb.Transaction_Merge_:
		return a.applyMerge(op.Merge)
	case *lancepb.Transaction_Restore_:
		return a.applyRestore(ctx, op.Restore, older)
	case *lancepb.Transaction_ReserveFragments_:
		a.reserve = op.ReserveFragments.GetNumFragments()
		return nil
	case *lancepb.Transaction_Update_:
		return a.applyUpdate(op.Update)
	case *lancepb.Transaction_Project_:
		return a.applyProject(op.Project)
	case *lancepb.Transaction_UpdateConfig_:
		return a.applyUpdateConfig(op.UpdateConfig)
	case *lancepb.Transaction_DataReplacement_:
		return a.applyDataReplacement(op.DataReplacement)
	case *lancepb.Transaction_UpdateBases_:
		return a.applyUpdateBases(op.UpdateBases)
	case *lancepb.Transaction_DataOverlay_:
		return a.applyDataOverlay(op.DataOverlay)
	}
	return a.errf(ErrUnsupportedOperation, "%s is not supported", a.kind)
}

// finish stamps the header of the new manifest and builds it.
func (a *applier) finish() (*Manifest, error) {
	h := a.b.fields() // the top-level fields; nested ones are read from a.b.nested()
	h.version = a.version
	h.unstamped = true

	if a.restored {
		// The restored content as it was, except that ids never go back:
		// an id must never name two different things.
		if cur, ok := a.head.MaxFragmentID(); ok && (!h.hasMaxID || h.maxID < cur) {
			h.setMaxID(cur)
		}
		if a.stable && h.nextRowID < a.nextRowID {
			h.nextRowID = a.nextRowID
		}
		return a.b.Build(), nil
	}

	h.tag = a.txn.GetTag()

	// max_fragment_id is a high-water mark (Lance's update_max_fragment_id).
	if maxID, ok := a.b.maxID(); ok {
		if maxID > math.MaxUint32 {
			return nil, a.invalid("fragment id %d does not fit the manifest's 32-bit max_fragment_id", maxID)
		}
		if !h.hasMaxID || uint32(maxID) > h.maxID {
			h.setMaxID(uint32(maxID))
		}
	}
	if a.kind == OpReserveFragments {
		cur := uint64(h.maxID)
		if cur+uint64(a.reserve) > math.MaxUint32 {
			return nil, a.invalid("reserving %d fragment ids overflows max_fragment_id %d", a.reserve, cur)
		}
		h.setMaxID(uint32(cur + uint64(a.reserve)))
	}

	// Feature flags, recomputed from the content as Lance's
	// apply_feature_flags does. Bits Lance takes from write parameters or
	// from state cellguard does not model (32 and up) are carried over.
	n := a.b.NumFragments()
	c := a.b.counts()
	var flags uint64
	if c.deletions > 0 {
		flags |= FlagDeletionFiles
	}
	if a.stable || c.rowIDs > 0 {
		if c.rowIDs != n {
			return nil, a.invalid("the table uses stable row ids but %d of %d fragments have no row id sequence", n-c.rowIDs, n)
		}
		flags |= FlagStableRowIDs
	}
	nested := a.b.nested()
	if len(nested.GetBasePaths()) > 0 {
		flags |= FlagBasePaths
	}
	if c.overlays > 0 {
		flags |= FlagDataOverlays
	}
	const carried = ^(FlagDeletionFiles | FlagStableRowIDs | FlagV2FormatDeprecated | FlagTableConfig | FlagBasePaths | FlagDataOverlays)
	reader := flags | h.reader&carried
	writer := flags | h.writer&carried
	if len(nested.GetConfig()) > 0 {
		writer |= FlagTableConfig
	}
	h.reader, h.writer = reader, writer

	if a.stable {
		h.nextRowID = a.nextRowID
	}
	return a.b.Build(), nil
}

// newSchema checks a schema a transaction supplies.
func (a *applier) newSchema(fields []*lancepb.Field) (*Schema, error) {
	for i, f := range fields {
		if f == nil {
			return nil, a.invalid("schema field %d is empty", i)
		}
	}
	fields = cloneAll(fields)
	s, err := NewSchema(fields)
	if err != nil {
		var te *Error
		if errors.As(err, &te) {
			return nil, a.invalid("schema: %s", te.Msg)
		}
		return nil, a.invalid("schema: %v", err)
	}
	return s, nil
}

func cloneAll[M proto.Message](ms []M) []M {
	out := make([]M, len(ms))
	for i, m := range ms {
		out[i] = proto.CloneOf(m)
	}
	return out
}

func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}
