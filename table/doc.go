// Package table is a pure model of a Lance table: the manifest of a
// version, what a transaction does to it, and whether two concurrent
// transactions can both land.
//
// A Lance dataset is a sequence of versions. Each version is a manifest:
// a schema (fields with ids), an ordered list of fragments, and a header
// (version number, next row id, config, base paths), and beside it the
// index section. A fragment
// is a run of rows stored in one or more data files; each data file holds
// some fields, by field id and column index. A fragment may also carry a
// deletion file (the physical offsets deleted, as a roaring bitmap) and
// overlay files (new values of some fields at some rows, newest last).
// Rows are addressed by row address: fragment id << 32 | physical offset,
// deleted rows counted. Nothing here reads data: files are named, never
// opened (package table/data does that).
//
// # Versions and transactions
//
// A transaction (lancepb.Transaction, Lance's own message) names the
// version it read and one operation: Append, Delete, Overwrite, Rewrite,
// Merge, Update, DataReplacement, DataOverlay, Project, Restore,
// CreateIndex, UpdateConfig, ReserveFragments, UpdateBases. [Apply] is the
// one function from a manifest and a transaction to the next manifest:
//
//	next, err := table.Apply(ctx, head, txn, older) // head nil: the creating Overwrite
//
// It replays real Lance histories byte for byte (see testdata/lance): a
// manifest is a value, so the committer's decision and every reader's
// replay of the decision log (internal/declog) produce the same version.
// Each version also carries its index section ([Manifest.Indices]): the
// index segments, the fields they index and the fragments they cover,
// which Apply edits as Lance does for every operation (apply_indices.go).
// A Restore needs an older version; [Versions] supplies it (the only I/O
// Apply can cause, bounded by its ctx). Manifests are
// immutable and share unchanged fragments, so a window of versions costs
// memory proportional to what changed. [Manifest.Edit] returns a
// [Builder] for the few places that assemble a manifest by hand.
//
// # Concurrency: conflicts and rebase
//
// Transactions staged at the same read version are decided in order, and
// each later one must be checked against everything committed after its
// read version. [CheckConflict] implements Lance's compatibility matrix
// for one pair (compatible, retryable, incompatible); [Rebase] checks a
// transaction against every version committed since it read and rewrites
// it onto the head, merging deletion vectors where both sides deleted
// rows of one fragment (it asks for the merged deletion files to be
// written, [NewDeletionFile]) and letting column rewrites of disjoint
// fields through. Deletion-vector contents come through
// [DeletionVectors]: deciding needs them, storing them is the caller's
// business ([MemDeletions] holds them in memory, for tests and tools).
// A [ConflictIndex] remembers what each committed transaction touched
// (its kind and fragments) and names the few committed versions a
// transaction can conflict with, so that Rebase sees those alone and a
// rebase costs what overlaps the transaction, not how far behind head it
// read.
//
// # Files
//
// [ReadManifestFile] and [WriteManifestFile] read and write Lance's
// _versions/*.manifest layout; [DecodeTransaction] and [OpOf] read
// _transactions/*.txn bodies; [DecodeRowAddrTreeMap] and [DecodeBitmap]
// read row-address sets and deletion vectors with bounds that make hostile
// input an error, never a panic. A [Decoder] decodes as DecodeTransaction
// does, but puts the usual Append (one fragment, one data file) in memory
// it reuses, and its [Decoder.Apply] writes that fragment into the next
// version as it was staged: a committer deciding thousands of appends a
// second neither allocates their messages nor encodes their fragments
// again.
//
// # Errors
//
// Every error is typed: [ErrMalformed] for bytes that do not decode,
// [ErrInvalidTransaction] for a transaction that does not apply to its
// manifest, [ErrUnsupportedOperation] for operations the model does not
// implement, [ErrVersionNotFound] from a [Versions] that does not have
// the version. A decision maps each to a rejection reason.
//
// The package has no I/O, no clock, no goroutines and no logging: the
// same inputs always give the same manifest, which is what lets the
// decision log be the only state that matters.
package table
