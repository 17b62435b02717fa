package table

import (
	"encoding/binary"
	"math"
	"path"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// ManifestFile is the content of one `_versions/*.manifest` file: the
// manifest and the sections stored beside it.
type ManifestFile struct {
	Manifest *lancepb.Manifest
	// Transaction is the inline transaction section; nil if there is none.
	Transaction *lancepb.Transaction
	// Indexes is the index section; nil if there is none.
	Indexes *lancepb.IndexSection
}

// Layout of a manifest file (Lance's `lance-table/src/io/manifest.rs`):
//
//	[u32 LE len | IndexSection]   optional; Manifest.index_section = its offset
//	[u32 LE len | Transaction]    optional; Manifest.transaction_section = its offset
//	[u32 LE len | Manifest]       at manifest_pos
//	[i64 LE manifest_pos][i16 LE major][i16 LE minor]["LANC"]
//
// Lance writes format version 0.2 (`MAJOR_VERSION`, `MINOR_VERSION` in
// lance-file's format.rs; every fixture has it); older writers wrote 0.1.
// The layout is the same for both, and both are read.
const (
	footerSize     = 16
	lenPrefixSize  = 4
	minFileSize    = lenPrefixSize + footerSize
	fileMagic      = "LANC"
	footerMajor    = 0
	footerMinor    = 2 // written
	footerMinMinor = 1 // oldest read
)

// ReadManifestFile decodes a whole manifest file. It checks the footer
// (magic, and format version 0.1 or 0.2), that the manifest's length
// prefix fills the space between manifest_pos and the footer exactly, and
// that each section the manifest points at lies, with its length prefix,
// before manifest_pos without overlapping the other. Bytes no section
// claims are allowed: a reader goes by the offsets (Lance itself writes
// the sections back to back). It decodes the manifest and both sections;
// the manifest keeps the offsets it was read with.
//
// Every error wraps ErrMalformed and says what is wrong. It never panics.
func ReadManifestFile(b []byte) (*ManifestFile, error) {
	const op = "read manifest file"
	if len(b) < minFileSize {
		return nil, errorf(op, ErrMalformed, "truncated: %d bytes, a manifest file has at least %d", len(b), minFileSize)
	}
	footer := b[len(b)-footerSize:]
	if magic := string(footer[12:]); magic != fileMagic {
		return nil, errorf(op, ErrMalformed, "wrong magic %q, want %q", magic, fileMagic)
	}
	major := int16(binary.LittleEndian.Uint16(footer[8:]))
	minor := int16(binary.LittleEndian.Uint16(footer[10:]))
	if major != footerMajor || minor < footerMinMinor || minor > footerMinor {
		return nil, errorf(op, ErrMalformed, "unsupported manifest file version %d.%d, want %d.%d to %d.%d",
			major, minor, footerMajor, footerMinMinor, footerMajor, footerMinor)
	}
	footerPos := uint64(len(b) - footerSize)
	pos := binary.LittleEndian.Uint64(footer) // an i64 on disk; negative is out of range too
	if pos > footerPos-lenPrefixSize {
		return nil, errorf(op, ErrMalformed, "manifest position %d out of range for a %d-byte file", int64(pos), len(b))
	}
	mlen := uint64(binary.LittleEndian.Uint32(b[pos:]))
	avail := footerPos - pos - lenPrefixSize
	if mlen > avail {
		return nil, errorf(op, ErrMalformed, "manifest length %d overruns file: %d bytes before the footer", mlen, avail)
	}
	if mlen < avail {
		return nil, errorf(op, ErrMalformed, "manifest length %d leaves %d bytes before the footer unaccounted for", mlen, avail-mlen)
	}
	f := &ManifestFile{Manifest: &lancepb.Manifest{}}
	if err := proto.Unmarshal(b[pos+lenPrefixSize:footerPos], f.Manifest); err != nil {
		return nil, errorf(op, ErrMalformed, "manifest: %v", err)
	}

	var idx, txn span
	if f.Manifest.IndexSection != nil {
		var msg string
		if idx, msg = sectionSpan(b, "index section", f.Manifest.GetIndexSection(), pos); msg != "" {
			return nil, errorf(op, ErrMalformed, "%s", msg)
		}
		f.Indexes = &lancepb.IndexSection{}
		if err := proto.Unmarshal(b[idx.body:idx.end], f.Indexes); err != nil {
			return nil, errorf(op, ErrMalformed, "index section: %v", err)
		}
	}
	if f.Manifest.TransactionSection != nil {
		var msg string
		if txn, msg = sectionSpan(b, "transaction section", f.Manifest.GetTransactionSection(), pos); msg != "" {
			return nil, errorf(op, ErrMalformed, "%s", msg)
		}
		f.Transaction = &lancepb.Transaction{}
		if err := proto.Unmarshal(b[txn.body:txn.end], f.Transaction); err != nil {
			return nil, errorf(op, ErrMalformed, "transaction section: %v", err)
		}
	}
	if f.Indexes != nil && f.Transaction != nil && idx.start < txn.end && txn.start < idx.end {
		return nil, errorf(op, ErrMalformed, "index section [%d, %d) overlaps transaction section [%d, %d)",
			idx.start, idx.end, txn.start, txn.end)
	}
	return f, nil
}

// span is where a length-prefixed section lies in a file: its length prefix
// at start, its protobuf in [body, end).
type span struct{ start, body, end uint64 }

// sectionSpan locates the section whose length prefix is at off; it must
// end by limit, where the manifest's own prefix starts.
func sectionSpan(b []byte, name string, off, limit uint64) (span, string) {
	if off > limit || limit-off < lenPrefixSize {
		return span{}, name + " offset " + strconv.FormatUint(off, 10) +
			" out of range: the manifest starts at " + strconv.FormatUint(limit, 10)
	}
	n := uint64(binary.LittleEndian.Uint32(b[off:]))
	body := off + lenPrefixSize
	if n > limit-body {
		return span{}, name + " length " + strconv.FormatUint(n, 10) + " at offset " + strconv.FormatUint(off, 10) +
			" overruns the manifest at " + strconv.FormatUint(limit, 10)
	}
	return span{start: off, body: body, end: body + n}, ""
}

// WriteManifestFile encodes f: the index section if f.Indexes is set, then
// the transaction section if f.Transaction is set, then the manifest and
// the footer. The manifest written is a copy of f.Manifest with
// index_section and transaction_section set to where those sections went
// (and cleared when there are none); f is not modified. Encoding is
// deterministic, so equal inputs give equal bytes.
//
// ReadManifestFile(WriteManifestFile(f)) equals f apart from those two
// offsets. Errors wrap ErrMalformed.
func WriteManifestFile(f *ManifestFile) ([]byte, error) {
	const op = "write manifest file"
	if f == nil || f.Manifest == nil {
		return nil, errorf(op, ErrMalformed, "no manifest")
	}
	opts := proto.MarshalOptions{Deterministic: true}
	m := proto.CloneOf(f.Manifest)
	m.IndexSection, m.TransactionSection = nil, nil
	var out []byte
	// section appends msg with its length prefix and returns its offset.
	section := func(name string, msg proto.Message) (uint64, error) {
		start := len(out)
		out = append(out, 0, 0, 0, 0)
		var err error
		if out, err = opts.MarshalAppend(out, msg); err != nil {
			return 0, errorf(op, ErrMalformed, "%s: %v", name, err)
		}
		n := len(out) - start - lenPrefixSize
		if uint64(n) > math.MaxUint32 {
			return 0, errorf(op, ErrMalformed, "%s is %d bytes, more than a u32 length allows", name, n)
		}
		binary.LittleEndian.PutUint32(out[start:], uint32(n))
		return uint64(start), nil
	}
	if f.Indexes != nil {
		off, err := section("index section", f.Indexes)
		if err != nil {
			return nil, err
		}
		m.IndexSection = &off
	}
	if f.Transaction != nil {
		off, err := section("transaction section", f.Transaction)
		if err != nil {
			return nil, err
		}
		m.TransactionSection = &off
	}
	pos, err := section("manifest", m)
	if err != nil {
		return nil, err
	}
	out = binary.LittleEndian.AppendUint64(out, pos)
	out = binary.LittleEndian.AppendUint16(out, footerMajor)
	out = binary.LittleEndian.AppendUint16(out, footerMinor)
	out = append(out, fileMagic...)
	return out, nil
}

const manifestExt = ".manifest"

// ManifestFileName returns the name, under `_versions/`, of the manifest of
// a main-line version: `{version}.manifest` in Lance's V1 naming scheme,
// or, with v2, `{u64::MAX - version}.manifest` zero-padded to 20 digits, so
// that a lexicographic listing starts with the newest version.
func ManifestFileName(version uint64, v2 bool) string {
	if !v2 {
		return strconv.FormatUint(version, 10) + manifestExt
	}
	s := strconv.FormatUint(math.MaxUint64-version, 10)
	return strings.Repeat("0", 20-len(s)) + s + manifestExt
}

// ParseManifestFileName returns the version whose manifest has the given
// file name, in either naming scheme; a directory prefix is ignored. A
// 20-digit name is V2 (as Lance decides), any other run of digits V1. It
// reports ok=false for anything that is not exactly the name
// ManifestFileName gives a version ≥ 1: detached manifests
// (`d{version}.manifest`), staging files (`{name}-{uuid}`), leading zeros,
// signs, and version 0.
func ParseManifestFileName(name string) (version uint64, ok bool) {
	stem, found := strings.CutSuffix(path.Base(name), manifestExt)
	if !found || stem == "" {
		return 0, false
	}
	for i := 0; i < len(stem); i++ {
		if stem[i] < '0' || stem[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(stem, 10, 64)
	if err != nil {
		return 0, false
	}
	v2 := len(stem) == 20
	if v2 {
		version = math.MaxUint64 - n
	} else {
		version = n
	}
	if version == 0 || ManifestFileName(version, v2) != path.Base(name) {
		return 0, false
	}
	return version, true
}

// TransactionFileName returns the name, under `_transactions/`, of the
// transaction file a writer at readVersion with the given transaction uuid
// writes: `{read_version}-{uuid}.txn`.
func TransactionFileName(readVersion uint64, uuid string) string {
	return strconv.FormatUint(readVersion, 10) + "-" + uuid + ".txn"
}
