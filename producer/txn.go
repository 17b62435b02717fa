package producer

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"cellguard/evaluator"
	"cellguard/internal/declog"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
	"cellguard/table/data/batch"
)

// Txn builds one Lance transaction read at a Snapshot: one kind of
// operation (the builder methods of one kind may be called many times)
// plus cell preconditions. Builder methods record the first error, which
// Proto and Commit return. A Txn is not safe for concurrent use, and it is
// frozen by its first Proto (or Stage, or Commit): committing it again
// sends the same bytes under the same uuid.
type Txn struct {
	dataset string
	snap    *Snapshot // nil for a creating Overwrite
	pb      *lancepb.Transaction
	op      table.Op
	err     error
	frozen  []byte
	staged  bool // staged by this process at least once

	pre   []evaluator.Precondition
	reads []*readGroup
	posts map[uint64]*lancepb.DataFragment // Delete/Update post-images by fragment id
}

// readGroup is the rows read of one set of fields.
type readGroup struct {
	fields []int32
	rows   evaluator.SelectionBuilder
}

// Create starts the transaction that creates dataset ds (version 1): an
// Overwrite read at version 0 with the given schema and fragments.
func Create(ds string, fields []*lancepb.Field, frags ...*lancepb.DataFragment) *Txn {
	t := &Txn{dataset: ds, pb: &lancepb.Transaction{Uuid: uuid.NewString()}}
	if err := validDataset(ds); err != nil {
		t.err = err
	}
	t.setOp(table.OpOverwrite)
	t.pb.Operation = &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{Schema: fields, Fragments: frags}}
	return t
}

// StorageVersion names the Lance data storage version ("2.0", "2.1" or
// "2.2", the one LanceDB 0.39 writes) of the dataset a creating
// transaction (Create) makes: a table created without data files gets it,
// and data files of another version make the creation rejected
// INVALID_TRANSACTION. Without it the table takes its files' version
// (data.Store.WriteFragment writes 2.2), else 2.1. Write the dataset's
// files with data.Store.WriteFragmentFor, which follows the version. It records the version in the transaction's
// dataset configuration (declog.ConfigProperty), keeping what else that
// holds.
func (t *Txn) StorageVersion(v string) *Txn {
	switch {
	case t.frozen != nil:
		return t.fail("modified after it was staged")
	case t.snap != nil || t.op != table.OpOverwrite:
		return t.fail("StorageVersion: only a creating transaction (Create) names a storage version")
	case v != "2.0" && v != "2.1" && v != "2.2":
		return t.fail("StorageVersion %q: want 2.0, 2.1 or 2.2", v)
	}
	cfg, err := declog.ConfigOf(t.pb)
	if err != nil {
		return t.fail("StorageVersion: %v", err)
	}
	if cfg == nil {
		cfg = &cellguardpb.DatasetConfig{}
	}
	cfg.StorageVersion = v
	if err := declog.SetConfig(t.pb, cfg); err != nil {
		return t.fail("StorageVersion: %v", err)
	}
	return t
}

// ID returns the transaction uuid: its identity in the staging stream and
// the decision log.
func (t *Txn) ID() string { return t.pb.GetUuid() }

// Dataset returns the dataset the transaction is for.
func (t *Txn) Dataset() string { return t.dataset }

// ReadVersion returns the version the transaction was read at.
func (t *Txn) ReadVersion() uint64 { return t.pb.GetReadVersion() }

// Snapshot returns the version the transaction reads (nil for Create).
func (t *Txn) Snapshot() *Snapshot { return t.snap }

// Err returns the first builder error.
func (t *Txn) Err() error { return t.err }

func (t *Txn) fail(format string, args ...any) *Txn {
	if t.err == nil {
		t.err = fmt.Errorf("producer: txn %s: %w: %s", t.ID(), ErrInvalidTxn, fmt.Sprintf(format, args...))
	}
	return t
}

// setOp fixes the kind of operation; a second kind is an error.
func (t *Txn) setOp(op table.Op) bool {
	switch {
	case t.frozen != nil:
		t.fail("modified after it was staged")
		return false
	case t.op == table.OpUnknown:
		t.op = op
		return true
	case t.op != op:
		t.fail("%s after %s: one kind of operation per transaction", op, t.op)
		return false
	}
	return true
}

// fragment returns fragment id of the read version.
func (t *Txn) fragment(id uint64) (*table.Fragment, bool) {
	if t.snap == nil {
		t.fail("fragment %d: a creating transaction reads no version", id)
		return nil, false
	}
	f, ok := t.snap.Manifest().Fragment(id)
	if !ok {
		t.fail("fragment %d is not in version %d", id, t.snap.Version())
	}
	return f, ok
}

// SetProperty sets a transaction property (Lance's
// transaction_properties; "__lance_commit_message" is Lance's).
func (t *Txn) SetProperty(key, value string) *Txn {
	if t.frozen != nil {
		return t.fail("modified after it was staged")
	}
	if t.pb.TransactionProperties == nil {
		t.pb.TransactionProperties = map[string]string{}
	}
	t.pb.TransactionProperties[key] = value
	return t
}

// Append adds new fragments (written with data.Store.WriteFragment; their
// ids are assigned at commit).
func (t *Txn) Append(frags ...*lancepb.DataFragment) *Txn {
	if !t.setOp(table.OpAppend) {
		return t
	}
	op, _ := t.pb.Operation.(*lancepb.Transaction_Append_)
	if op == nil {
		op = &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{}}
		t.pb.Operation = op
	}
	op.Append.Fragments = append(op.Append.Fragments, frags...)
	return t
}

// ReplaceColumns gives fragment fragmentID a new file for the fields file
// holds (written with data.Store.WriteColumns): a DataReplacement. Every
// file of one transaction must hold the same fields. A field no file of
// the fragment holds yet (a column added to the schema, reading as null)
// is added this way too.
func (t *Txn) ReplaceColumns(fragmentID uint64, file *lancepb.DataFile) *Txn {
	if !t.setOp(table.OpDataReplacement) {
		return t
	}
	if _, ok := t.fragment(fragmentID); !ok {
		return t
	}
	op, _ := t.pb.Operation.(*lancepb.Transaction_DataReplacement_)
	if op == nil {
		op = &lancepb.Transaction_DataReplacement_{DataReplacement: &lancepb.Transaction_DataReplacement{}}
		t.pb.Operation = op
	}
	op.DataReplacement.Replacements = append(op.DataReplacement.Replacements,
		&lancepb.Transaction_DataReplacementGroup{FragmentId: fragmentID, NewFile: file})
	return t
}

// RewriteColumns rewrites the fields file holds in fragment fragmentID in
// place: an Update in REWRITE_COLUMNS mode. The old copies of the fields
// are tombstoned; unlike ReplaceColumns, files of one transaction may hold
// different fields.
func (t *Txn) RewriteColumns(fragmentID uint64, file *lancepb.DataFile) *Txn {
	op := t.update(lancepb.Transaction_REWRITE_COLUMNS)
	if op == nil {
		return t
	}
	post := t.post(fragmentID)
	if post == nil {
		return t
	}
	fields := file.GetFields()
	var files []*lancepb.DataFile
	for _, df := range post.Files {
		if slices.ContainsFunc(df.GetFields(), func(id int32) bool { return slices.Contains(fields, id) }) {
			df = proto.CloneOf(df)
			for i, id := range df.Fields {
				if slices.Contains(fields, id) {
					df.Fields[i] = table.Tombstone
				}
			}
		}
		if slices.ContainsFunc(df.GetFields(), func(id int32) bool { return id != table.Tombstone }) {
			files = append(files, df)
		}
	}
	post.Files = append(files, file)
	for _, id := range fields {
		if id >= 0 && !slices.Contains(op.FieldsModified, uint32(id)) {
			op.FieldsModified = append(op.FieldsModified, uint32(id))
		}
	}
	return t
}

// Overlay attaches overlay files (written with data.Store.WriteOverlay) to
// fragment fragmentID: a DataOverlay. The commit stamps their version.
func (t *Txn) Overlay(fragmentID uint64, overlays ...*lancepb.DataOverlayFile) *Txn {
	if !t.setOp(table.OpDataOverlay) {
		return t
	}
	if _, ok := t.fragment(fragmentID); !ok {
		return t
	}
	op, _ := t.pb.Operation.(*lancepb.Transaction_DataOverlay_)
	if op == nil {
		op = &lancepb.Transaction_DataOverlay_{DataOverlay: &lancepb.Transaction_DataOverlay{}}
		t.pb.Operation = op
	}
	op.DataOverlay.Groups = append(op.DataOverlay.Groups,
		&lancepb.Transaction_DataOverlayGroup{FragmentId: fragmentID, Overlays: overlays})
	return t
}

// Delete installs deletion file df (from data.Store.DeleteRows, which
// keeps the rows already deleted) on fragment fragmentID. A fragment left
// with no live row is removed instead.
func (t *Txn) Delete(fragmentID uint64, df *lancepb.DeletionFile) *Txn {
	if !t.setOp(table.OpDelete) {
		return t
	}
	f, ok := t.fragment(fragmentID)
	if !ok {
		return t
	}
	op, _ := t.pb.Operation.(*lancepb.Transaction_Delete_)
	if op == nil {
		op = &lancepb.Transaction_Delete_{Delete: &lancepb.Transaction_Delete{}}
		t.pb.Operation = op
	}
	if df.GetNumDeletedRows() >= f.PhysicalRows() {
		op.Delete.DeletedFragmentIds = append(op.Delete.DeletedFragmentIds, fragmentID)
		return t
	}
	post := proto.CloneOf(f.Proto())
	post.DeletionFile = df
	op.Delete.UpdatedFragments = append(op.Delete.UpdatedFragments, post)
	return t
}

// RowDeleter writes the deletion file of a fragment with offsets added to
// the rows m already deletes. *data.Store (package cellguard/table/data)
// is one; the interface keeps the data plane out of programs that do not
// import it.
type RowDeleter interface {
	DeleteRows(ctx context.Context, m *table.Manifest, fragmentID uint64, offsets []uint32) (*lancepb.DeletionFile, error)
}

// DeleteRows writes the deletion file of fragment fragmentID with offsets
// added to the rows already deleted at the read version, through store
// (a *data.Store), and installs it (see Delete).
func (t *Txn) DeleteRows(ctx context.Context, store RowDeleter, fragmentID uint64, offsets ...uint32) error {
	if _, ok := t.fragment(fragmentID); !ok {
		return t.err
	}
	df, err := store.DeleteRows(ctx, t.snap.Manifest(), fragmentID, offsets)
	if err != nil {
		return fmt.Errorf("producer: txn %s: %w", t.ID(), err)
	}
	t.Delete(fragmentID, df)
	return t.err
}

// DeleteFragments removes whole fragments.
func (t *Txn) DeleteFragments(ids ...uint64) *Txn {
	if !t.setOp(table.OpDelete) {
		return t
	}
	op, _ := t.pb.Operation.(*lancepb.Transaction_Delete_)
	if op == nil {
		op = &lancepb.Transaction_Delete_{Delete: &lancepb.Transaction_Delete{}}
		t.pb.Operation = op
	}
	for _, id := range ids {
		if _, ok := t.fragment(id); ok {
			op.Delete.DeletedFragmentIds = append(op.Delete.DeletedFragmentIds, id)
		}
	}
	return t
}

// UpdateRows moves rows out of fragment fragmentID and re-inserts their
// new values: an Update in REWRITE_ROWS mode. df is the fragment's new
// deletion file (nil when no row leaves it); moved are new fragments with
// the updated rows (data.Store.WriteFragment), added once per call.
func (t *Txn) UpdateRows(fragmentID uint64, df *lancepb.DeletionFile, moved ...*lancepb.DataFragment) *Txn {
	op := t.update(lancepb.Transaction_REWRITE_ROWS)
	if op == nil {
		return t
	}
	if df != nil {
		f, ok := t.fragment(fragmentID)
		if !ok {
			return t
		}
		if df.GetNumDeletedRows() >= f.PhysicalRows() {
			op.RemovedFragmentIds = append(op.RemovedFragmentIds, fragmentID)
		} else if post := t.post(fragmentID); post != nil {
			post.DeletionFile = df
		}
	}
	op.NewFragments = append(op.NewFragments, moved...)
	return t
}

// update returns the Update operation in mode, creating it.
func (t *Txn) update(mode lancepb.Transaction_UpdateMode) *lancepb.Transaction_Update {
	if !t.setOp(table.OpUpdate) {
		return nil
	}
	op, _ := t.pb.Operation.(*lancepb.Transaction_Update_)
	if op == nil {
		op = &lancepb.Transaction_Update_{Update: &lancepb.Transaction_Update{UpdateMode: mode}}
		t.pb.Operation = op
	}
	if op.Update.UpdateMode != mode {
		t.fail("update modes %s and %s in one transaction", op.Update.UpdateMode, mode)
		return nil
	}
	return op.Update
}

// post returns the post-image of fragment id for an Update, creating it
// from the read version.
func (t *Txn) post(id uint64) *lancepb.DataFragment {
	if p, ok := t.posts[id]; ok {
		return p
	}
	f, ok := t.fragment(id)
	if !ok {
		return nil
	}
	p := proto.CloneOf(f.Proto())
	if t.posts == nil {
		t.posts = map[uint64]*lancepb.DataFragment{}
	}
	t.posts[id] = p
	op := t.pb.GetUpdate()
	op.UpdatedFragments = append(op.UpdatedFragments, p)
	return p
}

// AddColumns adds fields to the schema and, for the fragments in files,
// a data file holding them (data.Store.WriteColumns with the new schema):
// a Merge. Fragments without a file read the new fields as null.
func (t *Txn) AddColumns(fields []*lancepb.Field, files map[uint64]*lancepb.DataFile) *Txn {
	if !t.setOp(table.OpMerge) {
		return t
	}
	if t.snap == nil {
		return t.fail("AddColumns on a creating transaction")
	}
	if t.pb.Operation != nil {
		return t.fail("AddColumns called twice")
	}
	m := t.snap.Manifest()
	for id := range files {
		if _, ok := t.fragment(id); !ok {
			return t
		}
	}
	op := &lancepb.Transaction_Merge{Schema: append(slices.Clone(m.Schema().Fields()), fields...)}
	for f := range m.Fragments() {
		pb := f.Proto()
		if df, ok := files[f.ID()]; ok {
			pb = proto.CloneOf(pb)
			pb.Files = append(pb.Files, df)
		}
		op.Fragments = append(op.Fragments, pb)
	}
	t.pb.Operation = &lancepb.Transaction_Merge_{Merge: op}
	return t
}

// CellsUnchanged adds the precondition "the cells fields × rows are
// unchanged since the read version". Rows should be what the worker
// actually read; Read records that by itself.
func (t *Txn) CellsUnchanged(fields []int32, rows evaluator.RowSelection) *Txn {
	if t.frozen != nil {
		return t.fail("modified after it was staged")
	}
	if len(fields) == 0 || rows.IsEmpty() {
		return t.fail("CellsUnchanged needs fields and rows")
	}
	t.pre = append(t.pre, evaluator.CellsUnchanged(rows, slices.Clone(fields)...))
	return t
}

// FragmentReader reads the live rows of a fragment as of a manifest.
// *data.Store (package cellguard/table/data) is one.
type FragmentReader interface {
	ReadFragment(ctx context.Context, m *table.Manifest, fragmentID uint64, fields []int32) (*batch.Batch, error)
}

// Read reads fields of fragment fragmentID at the read version from store
// (a *data.Store) and protects the cells it returned: the live rows read,
// for those fields. Reads of the same fields are merged into one
// precondition.
func (t *Txn) Read(ctx context.Context, store FragmentReader, fragmentID uint64, fields ...int32) (*batch.Batch, error) {
	if t.frozen != nil {
		return nil, t.fail("modified after it was staged").err
	}
	if _, ok := t.fragment(fragmentID); !ok {
		return nil, t.err
	}
	b, err := store.ReadFragment(ctx, t.snap.Manifest(), fragmentID, fields)
	if err != nil {
		return nil, fmt.Errorf("producer: txn %s: read fragment %d: %w", t.ID(), fragmentID, err)
	}
	if len(b.Offsets) > 0 {
		t.readGroup(fields).rows.AddOffsets(fragmentID, b.Offsets...)
	}
	return b, nil
}

func (t *Txn) readGroup(fields []int32) *readGroup {
	key := slices.Sorted(slices.Values(fields))
	for _, g := range t.reads {
		if slices.Equal(g.fields, key) {
			return g
		}
	}
	g := &readGroup{fields: key}
	t.reads = append(t.reads, g)
	return g
}

// Proto returns the transaction (with its preconditions) and freezes the
// Txn. The result must not be modified.
func (t *Txn) Proto() (*lancepb.Transaction, error) {
	if t.err != nil {
		return nil, t.err
	}
	if t.frozen == nil {
		if t.op == table.OpUnknown {
			return nil, t.fail("no operation").err
		}
		pre := slices.Clone(t.pre)
		for _, g := range t.reads {
			if sel := g.rows.Build(); !sel.IsEmpty() {
				pre = append(pre, evaluator.CellsUnchanged(sel, g.fields...))
			}
		}
		t.pb.Preconditions = evaluator.Protos(pre)
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(t.pb)
		if err != nil {
			return nil, fmt.Errorf("producer: txn %s: encode: %w", t.ID(), err)
		}
		t.frozen = b
	}
	return t.pb, nil
}

// bytes returns the frozen wire form.
func (t *Txn) bytes() ([]byte, error) {
	if _, err := t.Proto(); err != nil {
		return nil, err
	}
	return t.frozen, nil
}

// String describes the transaction for logs: id, operation, read version,
// fragments touched and preconditions.
func (t *Txn) String() string {
	var b strings.Builder
	b.WriteString(t.op.String())
	b.WriteString(" ")
	b.WriteString(t.ID())
	b.WriteString(" on ")
	b.WriteString(t.dataset)
	b.WriteString("@")
	b.WriteString(strconv.FormatUint(t.ReadVersion(), 10))
	if n := len(t.pre) + len(t.reads); n > 0 {
		b.WriteString(" with ")
		b.WriteString(strconv.Itoa(n))
		b.WriteString(" precondition(s)")
	}
	return b.String()
}
