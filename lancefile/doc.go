// Package lancefile writes and reads Lance data files (file format 2.0,
// 2.1 and 2.2) in pure Go, with Apache Arrow
// (github.com/apache/arrow-go/v18) as the in-memory form. Real Lance 8
// (LanceDB 0.31) and Lance 12 (LanceDB 0.39) read what Writer writes, and
// Reader reads what both write with their default encodings (compressed
// ones included); the package's judge tests check both directions against
// both LanceDB versions.
//
// # The container
//
// A file is a run of data buffers followed by its metadata; all integers
// are little-endian and positions absolute:
//
//	[page buffers …]                 each starts at a multiple of 64 (Lance 2.1 checks this)
//	[global buffer 0]                FileDescriptor: the schema (Lance Field messages) and the row count
//	[ColumnMetadata 0][ColumnMetadata 1]…   one protobuf per column: its pages and encodings
//	[(u64 pos, u64 len) × columns]   column-metadata offset table
//	[(u64 pos, u64 len) × globals]   global-buffer offset table
//	[u64 metadata start][u64 column table][u64 global table]
//	[u32 globals][u32 columns][u16 major][u16 minor]["LANC"]   40-byte footer
//
// The footer says (0, 3) for format 2.0 (as Lance writes it; (2, 0) is
// read too), (2, 1) for 2.1 and (2, 2) for 2.2. A manifest's DataFile
// says 2.0 as file_major_version 2, minor 0, 2.1 as 2, 1 and 2.2 as 2, 2
// (FileInfo and Version.Numbers give these). Every column has the column-level
// encoding ColumnEncoding{values}; every page has a direct encoding, a
// google.protobuf.Any whose type URL names the message
// ("/lance.encodings.ArrayEncoding" for 2.0 pages,
// "/lance.encodings21.PageLayout" for 2.1 and 2.2 pages: 2.2 has no
// message package of its own, only new fields).
//
// Each top-level field is one column (column_indices 0, 1, 2, …). A page
// covers consecutive rows of one column; its priority is its first row.
// The writer closes a page when it holds about WriterOptions.PageBytes
// bytes (DefaultPageBytes, 4 MiB, by default), so memory stays bounded by
// one page per column however many record batches are written.
//
// # Encodings written
//
// Format 2.0: nullable{no_nulls | some_nulls{validity bitmap} | all_nulls}
// over flat values (or fixed_size_list over flat), and binary{end
// offsets with nulls shifted by null_adjustment, bytes} for strings and
// binary. See enc20.go.
//
// Format 2.1: all-null pages use the all-null layout. Values under 256
// bytes use the mini-block layout: chunks of at most 32 KiB and a
// power-of-two number of values, with u16 definition levels when the
// page has nulls, and flat, fixed_size_list(flat) or variable(flat
// offsets) values. Larger values (a vector of 768 floats, long strings)
// use the full-zip layout, each row preceded by a definition byte when the
// page has nulls and, for variable width, its length. See enc21.go.
//
// Format 2.2: as 2.1, except that mini-block pages set has_large_chunk
// and write the chunk table entries and each chunk's value-buffer sizes
// as u32 (Lance 12 refuses a 2.2 mini-block page without it).
//
// Fixed-width values without nulls are not copied on Write: the writer
// retains the arrays until their page is written and gathers the slices
// into the file, so a value is copied once.
//
// # Types
//
// int8–int64, uint8–uint64, float32 ("float"), float64 ("double"), bool,
// timestamps ("timestamp:us:-", "timestamp:ms:UTC"), date32
// ("date32:day"), utf8 ("string"), large_utf8, binary, large_binary, and
// fixed-size lists of those numbers ("fixed_size_list:float:768",
// embedding vectors), all nullable or not. A fixed-size list's items may
// not be null (whole lists may). Writer writes no nested types. Reader
// (2.1 and 2.2) also reads structs and lists of those types, one level
// deep: a struct has no column of its own, each child is a column named
// "struct.child" that reads null where the struct or the child is null; a
// list is one column, an Arrow list whose items may be null, itself null
// or empty.
//
// # Reading
//
// Open checks the footer, the tables and the schema without reading any
// page, and that the page buffers lie inside the file and add up to at
// most its size. ReadColumn, ReadRange and Take decode only the pages
// that hold the requested rows, and of a mini-block page only the chunks
// that hold them, so the work is bounded by the bytes read plus the rows
// asked for.
//
// Reader decodes everything Writer writes and what LanceDB 0.31 and 0.39
// write by default (checked against LanceDB-written fixtures in
// testdata/lancedb, made by the judge tests with -lancefile.update):
//
//   - 2.0: nullable, flat, fixed_size_list (with null items), binary, and
//     dictionary-encoded strings (index 0 is null, k is item k-1).
//   - 2.1 mini-block: flat; inline_bitpacking (FastLanes blocks of 1,024
//     values, see compress21.go); definition levels flat, inline- or
//     out-of-line bit-packed; rle; string dictionaries; fsst over
//     variable; general(zstd|lz4) over those or over byte_stream_split;
//     fixed_size_list with item validity.
//   - 2.1 full-zip: fixed width (fixed-size lists with item validity),
//     variable width plain or fsst. All-null layout.
//   - 2.2: the same, with u32 mini-block sizes; dictionaries of strings,
//     binary or numbers, bare or in a general LZ4 block (a u32 length and
//     one raw LZ4 block); run-length definition levels; the constant
//     layout, with its value inline or in a scalar buffer, with or
//     without definition levels, and all-null pages.
//   - Structs (2.1 and 2.2): each child's pages carry the struct's layer
//     too, a definition level above the child's.
//   - Lists (2.1 and 2.2): mini-block pages with repetition and
//     definition levels; a row may continue into the next chunk, so a
//     list page is decoded from its first chunk up to the rows asked for.
//
// Anything else — lists in full-zip or constant pages, a 2.1 constant
// layout with a value, out-of-line bit-packed values, blob and sparse
// layouts — gives an *UnsupportedEncodingError naming the encoding, never
// a wrong value; nested fields in 2.0 files and nesting deeper than one
// level give an *UnsupportedTypeError at Open. Malformed bytes give errors wrapping ErrMalformed: every length or count
// read from the file is checked against the bytes available before it is
// used, decompressed buffers are bounded, and no input makes the reader
// panic (FuzzOpen, FuzzReadColumn).
//
// # Writing a data file for a dataset
//
//	w, err := lancefile.NewWriter(f, schema, fieldIDs, lancefile.WriterOptions{Version: lancefile.V2_1})
//	for each batch { err = w.Write(rec) }
//	info, err := w.Close()
//	dataFile := info.DataFile("<name>.lance") // path relative to data/
//
// The manifest's fields are lancefile.Fields(schema, fieldIDs), its
// data_format version the Version's String ("2.0", "2.1" or "2.2"); one
// dataset must hold files of that version only: Lance 8 refuses to append
// to a table that mixes versions and Lance 12 refuses to open it.
package lancefile
