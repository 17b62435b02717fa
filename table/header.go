package table

// header.go keeps a version's manifest header as two parts: a header
// message that versions share, and the few top-level fields a version
// changes (topFields). Applying an Append changes the version, the tag,
// max_fragment_id, the feature flags and next_row_id, and clears the
// fields the committer stamps when it writes the manifest file. Copying
// the whole header message for that (about 300 bytes, and its unknown
// fields) would be the largest allocation of a decision; a version carries
// its own top fields beside a pointer to the shared message, and a full
// header is put together only where one is asked for (Manifest.Header,
// Proto, AppendEncoding).
//
// Tables also share headers with each other: a header message a
// transaction builds or a manifest file brings is looked up among the
// headers in use (shareHeader), so tables created alike (the same data
// format, feature flags and config at the same version) hold one
// between them, where a committer serving 100,000 tables would otherwise
// keep 100,000 equal copies of some 400 bytes.

import (
	"hash/maphash"
	"slices"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// headers holds the shared header messages in use by a hash of their
// deterministic encoding, weakly; proto.Equal confirms a match.
var headers = newWeakSet[uint64, lancepb.Manifest](func(a, b *lancepb.Manifest) bool { return proto.Equal(a, b) })

var headerSeed = maphash.MakeSeed()

// maxSharedHeader bounds the encoded size of a header looked up in
// headers: one with large table metadata is rarely another table's, and
// encoding it to find out would cost more than it saves.
const maxSharedHeader = 4 << 10

// shareHeader returns a header in use equal to h, a header message no
// one will modify (fields and fragments unset), or h itself, which
// later equal headers then share.
func shareHeader(h *lancepb.Manifest) *lancepb.Manifest {
	opts := proto.MarshalOptions{Deterministic: true}
	if opts.Size(h) > maxSharedHeader {
		return h
	}
	b, err := opts.Marshal(h)
	if err != nil {
		return h
	}
	return headers.put(maphash.Bytes(headerSeed, b), h)
}

// topFields are the top-level header fields a version sets for itself.
// In a Manifest they override the shared header's: the header of version
// m is m.header with m.top written over it (writeTo).
type topFields struct {
	version   uint64 // version
	nextRowID uint64 // next_row_id
	reader    uint64 // reader_feature_flags
	writer    uint64 // writer_feature_flags
	tag       string // tag
	maxID     uint32 // max_fragment_id, when hasMaxID
	hasMaxID  bool
	// unstamped: timestamp, writer_version, transaction_file,
	// transaction_section, index_section and version_aux_data are unset
	// (Apply clears them: the committer stamps them when it writes the
	// manifest file). When false, they are the shared header's.
	unstamped bool
}

// topOf returns h's top fields.
func topOf(h *lancepb.Manifest) topFields {
	t := topFields{
		version:   h.GetVersion(),
		nextRowID: h.GetNextRowId(),
		reader:    h.GetReaderFeatureFlags(),
		writer:    h.GetWriterFeatureFlags(),
		tag:       h.GetTag(),
		unstamped: !stamped(h),
	}
	if h.MaxFragmentId != nil {
		t.maxID, t.hasMaxID = *h.MaxFragmentId, true
	}
	return t
}

// stamped reports whether h has any of the fields unstamped clears.
func stamped(h *lancepb.Manifest) bool {
	return h.Timestamp != nil || h.WriterVersion != nil || h.TransactionFile != "" ||
		h.TransactionSection != nil || h.IndexSection != nil || h.VersionAuxData != 0
}

// writeTo sets h's top fields to t. h must be a message of the caller's
// own (shallowHeader's copy, or a clone).
func (t *topFields) writeTo(h *lancepb.Manifest) {
	h.Version, h.NextRowId, h.Tag = t.version, t.nextRowID, t.tag
	h.ReaderFeatureFlags, h.WriterFeatureFlags = t.reader, t.writer
	h.MaxFragmentId = nil
	if t.hasMaxID {
		id := t.maxID
		h.MaxFragmentId = &id
	}
	if t.unstamped {
		h.Timestamp, h.WriterVersion = nil, nil
		h.TransactionFile, h.TransactionSection = "", nil
		h.IndexSection, h.VersionAuxData = nil, 0
	}
}

// changes reports whether writing t over h would change h.
func (t *topFields) changes(h *lancepb.Manifest) bool {
	was := topOf(h)
	if !t.unstamped {
		was.unstamped = false // writeTo leaves h's stamps as they are
	}
	return *t != was
}

// setMaxID sets max_fragment_id.
func (t *topFields) setMaxID(id uint32) { t.maxID, t.hasMaxID = id, true }

// header returns the header with top over shared: shared itself when top
// changes nothing in it, else a shallow copy (sharing shared's nested
// messages, lists and maps) with top written over it.
func header(shared *lancepb.Manifest, top *topFields) *lancepb.Manifest {
	if !top.changes(shared) {
		return shared
	}
	h := shallowHeader(shared)
	top.writeTo(h)
	return h
}

// shallowHeader returns a copy of h's top-level fields, sharing every
// nested message, list and map with h. Every field of lancepb.Manifest is
// listed (TestShallowHeaderCopiesEveryField fails when one is missing).
func shallowHeader(h *lancepb.Manifest) *lancepb.Manifest {
	c := new(lancepb.Manifest)
	copyTopLevel(c, h)
	return c
}

// copyTopLevel sets c, a new message, to shallowHeader(h).
func copyTopLevel(c, h *lancepb.Manifest) {
	*c = lancepb.Manifest{
		Fields:             h.Fields,
		SchemaMetadata:     h.SchemaMetadata,
		Fragments:          h.Fragments,
		Version:            h.Version,
		VersionAuxData:     h.VersionAuxData,
		WriterVersion:      h.WriterVersion,
		IndexSection:       h.IndexSection,
		Timestamp:          h.Timestamp,
		Tag:                h.Tag,
		ReaderFeatureFlags: h.ReaderFeatureFlags,
		WriterFeatureFlags: h.WriterFeatureFlags,
		MaxFragmentId:      h.MaxFragmentId,
		TransactionFile:    h.TransactionFile,
		TransactionSection: h.TransactionSection,
		NextRowId:          h.NextRowId,
		DataFormat:         h.DataFormat,
		Config:             h.Config,
		TableMetadata:      h.TableMetadata,
		BasePaths:          h.BasePaths,
		Branch:             h.Branch,
	}
	if u := h.ProtoReflect().GetUnknown(); len(u) > 0 {
		c.ProtoReflect().SetUnknown(slices.Clone(u))
	}
}
