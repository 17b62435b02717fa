// Package data is cellguard's data plane: it writes and reads the data
// files of a Lance-format table for cellguard's own workers, demo and
// subscribers.
//
// The committer never opens a data file. A transaction names files by path
// and field ids in Lance's own manifest structures (DataFile, DataFragment,
// DeletionFile, DataOverlayFile), and the committer decides on those alone,
// so it does not care what is inside the files. This package fills them.
// Data files are real Lance data files (file format 2.0, 2.1 or 2.2),
// written and read with package cellguard/lancefile, so Lance itself
// (LanceDB 0.31 and 0.39, Lance 8 and 12) scans what this package writes; Arrow
// (github.com/apache/arrow-go/v18) is only the in-memory form of the
// values going in and out. Overlay files are Lance files too, though only
// cellguard's readers resolve overlays: Lance 8 has no overlay reader, so
// a dataset served to it must not hold any. Deletion files are real Lance
// deletion files.
//
// # Layout
//
// A Store is rooted at the dataset directory, where `_versions/` also
// lives, in any gocloud.dev/blob bucket:
//
//	data/{random}.lance                       data files and overlay files
//	_deletions/{frag}-{read_version}-{id}.bin deletion files (Lance BITMAP form)
//
// Each data file holds one column per field, in field id order, each
// recorded with its Lance field id in the file's schema; the DataFile
// that names the file lists those field ids, their column indices, the
// file's size and its format version as Lance records it
// (file_major_version/file_minor_version 2/2 for a 2.2 file, 2/1 for
// 2.1, 2/0 for 2.0): what the bytes really are.
//
// # File versions
//
// All data files of a dataset must have the dataset's storage version
// (its manifest's data_format): Lance 8 reads a table that mixes versions
// (or whose files differ from its data_format), but then fails every
// later append or optimize; Lance 12 refuses to open it. So the writers
// never choose a version on their own:
//
//   - WriteFragment writes a fragment of a new table, in format 2.2
//     (NewTableVersion, LanceDB 0.39's default), and creating the table
//     from such fragments records 2.2 as its data format;
//     WriteFragmentVersion writes such a fragment in a version of the
//     caller's choice (LanceDB 0.31 defaults to 2.1);
//   - WriteFragmentFor writes a fragment for a transaction on an existing
//     version m, in m's format (FileVersion);
//   - WriteColumns and WriteOverlay write the version of the fragment's
//     other files (FragmentVersion).
//
// Arrow IPC data files (`data/*.arrow`) written by cellguard before it
// wrote Lance files are still read, told apart by their extension, and
// never written. Bytes of either format under the other's name fail with a
// *FormatError; nothing is ever misread.
//
// A deletion file is a portable 32-bit roaring bitmap of deleted physical
// offsets, exactly what Lance writes for large deletion sets. The reader
// also takes Lance's Arrow form (`.arrow`: a ZSTD-compressed Arrow IPC file
// with one UInt32 column row_id), so it reads deletion files that Lance
// wrote itself.
//
// # Opening a store
//
//	s, err := data.Open(ctx, "/var/lib/cellguard/orders")     // or file:///…
//	s, err := data.Open(ctx, "mem://")                          // tests
//	s, err := data.Open(ctx, "s3://bucket/tables/orders?region=eu-west-1")
//
// For S3 the URL path becomes the key prefix of the dataset. Credentials
// come from the usual AWS sources (environment, shared config, instance
// role). For S3-compatible stores such as MinIO, add
// endpoint=http://host:9000&use_path_style=true&disable_https=true. Other
// gocloud.dev/blob drivers (gcsblob, azureblob) work once a blank import
// links them into the binary. NewStore wraps a bucket you opened yourself.
//
// # Writing
//
// Each writer stores one file, streaming it to the bucket page by page
// (the Lance writer holds at most about one page per column), and returns
// the protobuf piece a transaction carries. The caller builds the transaction. The files are
// inert until a commit names them, and a file whose transaction is
// rejected is garbage for a cleaner to collect.
//
//	WriteFragment, WriteFragmentFor → *lancepb.DataFragment (id 0; the commit assigns it) → Overwrite, Append, Rewrite
//	WriteColumns  → *lancepb.DataFile for an existing fragment → DataReplacement, Update (REWRITE_COLUMNS), Merge
//	WriteOverlay  → *lancepb.DataOverlayFile (committed_version 0; the commit stamps it) → DataOverlay
//	DeleteRows    → *lancepb.DeletionFile (old ∪ new deletions, read_version stamped) → Delete, Update
//
// Values go in as Arrow arrays keyed by field id, one value per physical
// row, or per covered cell for an overlay (Cells). The schema passed in is
// the one the transaction commits, so a column being added must already be
// in it. Writers check that each field exists and has a supported type
// equal to its array's type, that non-nullable fields get no nulls, that
// lengths agree with each other and with the fragment, and that overlay
// offsets are in range and distinct.
//
// An overlay stores the value of a covered offset o at position rank(o)
// of its field's coverage bitmap, as Lance specifies. When all fields
// cover the same offsets it has one shared_offset_bitmap; otherwise it
// has a bitmap per field (field_coverage), and shorter columns are padded
// with trailing nulls, because the columns of a file have one length.
//
// # Reading
//
// Scan yields one Batch per fragment of a manifest, in scan order, and
// ReadFragment reads one fragment. A Batch lists the physical offsets of
// the live rows (Offsets) and, per requested field id, an Arrow array
// with one value per live row (Columns). Rows are addressed by fragment
// id and physical offset, as preconditions address them. ReadCells reads
// one field at chosen offsets. Values are resolved as Lance resolves them:
//
//  1. The newest overlay of the fragment that covers the cell gives its
//     value, even a null. Newer means a higher committed_version; between
//     equal versions it means later in the fragment's overlay list.
//     Overlay fields tombstoned as -2 are ignored.
//  2. Otherwise the data file that holds the field gives it, found with
//     table.Fragment.Locate.
//  3. Otherwise the cell is null: a field no file of the fragment holds
//     (a column added later, say) reads as null.
//
// Deleted rows are left out whatever overlays say about them.
//
// The Store implements table.DeletionVectors, so the committer and the
// evaluator can read deletion files through it.
//
// # Types
//
// Lance records a column's type as a logical_type string in the schema.
// Supported types, with the strings real Lance writes: bool, int8, int16,
// int32, int64, uint8, uint16, uint32, uint64, float (float32), double
// (float64), string (utf8), large_string, binary, large_binary, and
// fixed-size lists of the numeric ones ("fixed_size_list:float:768", an
// embedding vector). Whole lists may be null; items may not be in what
// this package writes, but are carried when a file Lance wrote has them.
// ArrowType and LogicalType convert between them. Nested fields and other
// types give ErrUnsupported.
//
// # Errors and robustness
//
// Files are checked against the manifest that names them. A file that
// does not decode, or whose column type, field id or length disagrees with
// the manifest, gives a *FormatError, which matches table.ErrMalformed.
// So does coverage past the end of the fragment, or a deletion file whose
// count differs from the manifest's. Input that would make the Arrow IPC
// decoder (legacy data files, Lance's Arrow deletion files) panic is
// caught and reported the same way. A Lance file in an encoding lancefile
// does not decode yet, such as the compressed encodings LanceDB writes by
// default, gives ErrUnsupported wrapping lancefile's error that names the
// encoding; its values are never guessed. Missing files and unknown
// fragments or fields give ErrNotFound. A point read of a deleted row
// gives ErrDeleted, and an offset past the fragment gives ErrOutOfRange.
// Bad writer input gives ErrInvalidArgument. Files under
// Manifest.base_paths (DataFile.base_id) give ErrUnsupported.
//
// # Memory and concurrency
//
// A Store is safe for concurrent use. Files never change once written, so
// it caches by path, in LRUs bounded by Options: the tail of each opened
// Lance file (footer, schema, column metadata: reopening it costs no
// I/O), decoded columns, and deletion vectors. Pages are read by range,
// only for the columns a read asks for. A read of most of a fragment's
// rows decodes the whole column and caches it; a read of a few rows (under
// a quarter of the fragment, ReadCells say) takes only the pages holding
// them and caches nothing. Returned arrays use Go-managed memory, so
// calling Release on them (or Batch.Release) is allowed but never
// required. Scanning a fragment with no overlays and no deletions returns
// the cached column itself, without a copy.
package data
