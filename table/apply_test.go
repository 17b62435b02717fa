package table_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// ---- builders for test manifests and transactions (prefix ap) ----

func apSchema() []*lancepb.Field {
	return []*lancepb.Field{
		{Id: 0, ParentId: -1, Name: "id", LogicalType: "int32", Type: lancepb.Field_LEAF},
		{Id: 1, ParentId: -1, Name: "name", LogicalType: "string", Nullable: true, Type: lancepb.Field_LEAF},
		{Id: 2, ParentId: -1, Name: "value", LogicalType: "double", Nullable: true, Type: lancepb.Field_LEAF},
		{Id: 3, ParentId: -1, Name: "category", LogicalType: "int32", Type: lancepb.Field_LEAF},
	}
}

func apFile(path string, fields ...int32) *lancepb.DataFile {
	ci := make([]int32, len(fields))
	for i := range ci {
		ci[i] = int32(i)
	}
	return &lancepb.DataFile{Path: path, Fields: fields, ColumnIndices: ci, FileMajorVersion: 2, FileMinorVersion: 1, FileSizeBytes: 100}
}

func apFrag(id, rows uint64, files ...*lancepb.DataFile) *lancepb.DataFragment {
	if len(files) == 0 {
		files = []*lancepb.DataFile{apFile(fmt.Sprintf("f%d.lance", id), 0, 1, 2, 3)}
	}
	return &lancepb.DataFragment{Id: id, PhysicalRows: rows, Files: files}
}

func apDel(readVersion, id, n uint64) *lancepb.DeletionFile {
	return &lancepb.DeletionFile{ReadVersion: readVersion, Id: id, NumDeletedRows: n}
}

func apBitmap(vals ...uint32) []byte {
	b, err := roaring.BitmapOf(vals...).ToBytes()
	if err != nil {
		panic(err)
	}
	return b
}

func apOverlay(path string, fields []int32, rows []uint32, committed uint64) *lancepb.DataOverlayFile {
	return &lancepb.DataOverlayFile{
		DataFile:         apFile(path, fields...),
		Coverage:         &lancepb.DataOverlayFile_SharedOffsetBitmap{SharedOffsetBitmap: apBitmap(rows...)},
		CommittedVersion: committed,
	}
}

// apManifest is a manifest at version with the 4-field schema, the given
// fragments and max_fragment_id = the largest id.
func apManifest(version uint64, frags ...*lancepb.DataFragment) *lancepb.Manifest {
	m := &lancepb.Manifest{
		Version:    version,
		Fields:     apSchema(),
		Fragments:  frags,
		DataFormat: &lancepb.Manifest_DataStorageFormat{FileFormat: "lance", Version: "2.1"},
		// Stale values the new version must not inherit.
		Timestamp:          timestamppb.New(timestamppb.Now().AsTime()),
		WriterVersion:      &lancepb.Manifest_WriterVersion{Library: "lance", Version: "8.0.0"},
		TransactionFile:    "x.txn",
		TransactionSection: proto.Uint64(7),
		IndexSection:       proto.Uint64(3),
		Tag:                "old-tag",
	}
	for _, f := range frags {
		if m.MaxFragmentId == nil || uint32(f.GetId()) > m.GetMaxFragmentId() {
			m.MaxFragmentId = proto.Uint32(uint32(f.GetId()))
		}
		if f.GetDeletionFile() != nil {
			m.ReaderFeatureFlags |= table.FlagDeletionFiles
			m.WriterFeatureFlags |= table.FlagDeletionFiles
		}
	}
	return m
}

func apLoad(t *testing.T, m *lancepb.Manifest) *table.Manifest {
	t.Helper()
	out, err := table.FromProto(m)
	if err != nil {
		t.Fatalf("FromProto: %v", err)
	}
	return out
}

// apBase is version 3 of a table with fragments 0, 1 and 2 of 10 rows.
func apBase() *lancepb.Manifest {
	return apManifest(3, apFrag(0, 10), apFrag(1, 10), apFrag(2, 10))
}

// apRangeIDs is a RowIdSequence of the one range [start, end), as Lance
// encodes it.
func apRangeIDs(start, end uint64) []byte {
	var r []byte
	if start != 0 {
		r = protowire.AppendTag(r, 1, protowire.VarintType)
		r = protowire.AppendVarint(r, start)
	}
	if end != 0 {
		r = protowire.AppendTag(r, 2, protowire.VarintType)
		r = protowire.AppendVarint(r, end)
	}
	seg := protowire.AppendTag(nil, 1, protowire.BytesType)
	seg = protowire.AppendBytes(seg, r)
	out := protowire.AppendTag(nil, 1, protowire.BytesType)
	return protowire.AppendBytes(out, seg)
}

// apVersions is a RowDatasetVersionSequence of runs (rows, version), as
// Lance encodes it: each run's span is the range of row positions it covers.
func apVersions(runs ...[2]uint64) []byte {
	var out []byte
	pos := uint64(0)
	for _, r := range runs {
		var rng []byte
		if pos != 0 {
			rng = protowire.AppendTag(rng, 1, protowire.VarintType)
			rng = protowire.AppendVarint(rng, pos)
		}
		rng = protowire.AppendTag(rng, 2, protowire.VarintType)
		rng = protowire.AppendVarint(rng, pos+r[0])
		seg := protowire.AppendTag(nil, 1, protowire.BytesType) // U64Segment.range
		seg = protowire.AppendBytes(seg, rng)
		body := protowire.AppendTag(nil, 1, protowire.BytesType) // run.span
		body = protowire.AppendBytes(body, seg)
		body = protowire.AppendTag(body, 2, protowire.VarintType) // run.version
		body = protowire.AppendVarint(body, r[1])
		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendBytes(out, body)
		pos += r[0]
	}
	return out
}

// apStable makes m a stable-row-id table: fragment i gets row ids from the
// running counter and created/updated versions 1.
func apStable(m *lancepb.Manifest) *lancepb.Manifest {
	m.ReaderFeatureFlags |= table.FlagStableRowIDs
	m.WriterFeatureFlags |= table.FlagStableRowIDs
	next := uint64(0)
	for _, f := range m.Fragments {
		n := f.GetPhysicalRows()
		f.RowIdSequence = &lancepb.DataFragment_InlineRowIds{InlineRowIds: apRangeIDs(next, next+n)}
		f.CreatedAtVersionSequence = &lancepb.DataFragment_InlineCreatedAtVersions{InlineCreatedAtVersions: apVersions([2]uint64{n, 1})}
		f.LastUpdatedAtVersionSequence = &lancepb.DataFragment_InlineLastUpdatedAtVersions{InlineLastUpdatedAtVersions: apVersions([2]uint64{n, 1})}
		next += n
	}
	m.NextRowId = next
	return m
}

func apFragByID(m *lancepb.Manifest, id uint64) *lancepb.DataFragment {
	for _, f := range m.GetFragments() {
		if f.GetId() == id {
			return f
		}
	}
	return nil
}

// ---- the runner ----

type apCase struct {
	name    string
	head    *lancepb.Manifest // nil: apBase()
	txn     *lancepb.Transaction
	older   table.Versions
	wantErr error // a sentinel; nil: success
	check   func(t *testing.T, got *lancepb.Manifest)
}

// apRun applies each case and checks, besides the case's own
// check: the error class; that Apply modified neither head nor txn; that it
// is deterministic; the new version number; and that the fields the
// committer stamps are cleared.
func apRun(t *testing.T, cases []apCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hpb := c.head
			if hpb == nil {
				hpb = apBase()
			}
			head := apLoad(t, hpb)
			headBytes := apMarshal(t, head.Proto())
			txnBytes := apMarshal(t, c.txn)

			got, err := table.Apply(t.Context(), head, c.txn, c.older)

			if !slices.Equal(apMarshal(t, head.Proto()), headBytes) {
				t.Errorf("Apply modified the head manifest")
			}
			if !slices.Equal(apMarshal(t, c.txn), txnBytes) {
				t.Errorf("Apply modified the transaction")
			}
			if c.wantErr != nil {
				var te *table.Error
				if err == nil {
					t.Fatalf("Apply succeeded; want an error wrapping %v", c.wantErr)
				}
				if !errors.Is(err, c.wantErr) || !errors.As(err, &te) {
					t.Fatalf("Apply error %v (%T); want a *table.Error wrapping %v", err, err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			again, err := table.Apply(t.Context(), head, c.txn, c.older)
			if err != nil || !proto.Equal(again.Proto(), got.Proto()) {
				t.Errorf("Apply is not deterministic (%v)", err)
			}
			pb := got.Proto()
			if pb.GetVersion() != head.Version()+1 || got.Version() != head.Version()+1 {
				t.Errorf("version %d; want %d", pb.GetVersion(), head.Version()+1)
			}
			if pb.Timestamp != nil || pb.WriterVersion != nil || pb.TransactionFile != "" || pb.TransactionSection != nil || pb.IndexSection != nil {
				t.Errorf("stamped fields not cleared: %v", rpText(pb))
			}
			// The result must be a valid manifest on its own.
			if _, err := table.FromProto(pb); err != nil {
				t.Errorf("FromProto(result): %v", err)
			}
			if c.check != nil {
				c.check(t, pb)
			}
		})
	}
}

func apMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func apWantIDs(t *testing.T, m *lancepb.Manifest, ids ...uint64) {
	t.Helper()
	if got := rpFragmentIDs(m); !slices.Equal(got, ids) {
		t.Errorf("fragment ids %v; want %v", got, ids)
	}
}

func apWantMaxID(t *testing.T, m *lancepb.Manifest, want uint32) {
	t.Helper()
	if m.MaxFragmentId == nil || m.GetMaxFragmentId() != want {
		t.Errorf("max_fragment_id %s; want %d", rpOptU32(m.MaxFragmentId), want)
	}
}

func apWantFlags(t *testing.T, m *lancepb.Manifest, reader, writer uint64) {
	t.Helper()
	if m.GetReaderFeatureFlags() != reader || m.GetWriterFeatureFlags() != writer {
		t.Errorf("flags reader %d writer %d; want %d, %d", m.GetReaderFeatureFlags(), m.GetWriterFeatureFlags(), reader, writer)
	}
}

func apWantFields(t *testing.T, df *lancepb.DataFile, fields ...int32) {
	t.Helper()
	if !slices.Equal(df.GetFields(), fields) {
		t.Errorf("file %q fields %v; want %v", df.GetPath(), df.GetFields(), fields)
	}
}

func apWantPaths(t *testing.T, f *lancepb.DataFragment, paths ...string) {
	t.Helper()
	var got []string
	for _, df := range f.GetFiles() {
		got = append(got, df.GetPath())
	}
	if !slices.Equal(got, paths) {
		t.Errorf("fragment %d files %v; want %v", f.GetId(), got, paths)
	}
}

// ---- per operation ----

func apAppend(read uint64, frags ...*lancepb.DataFragment) *lancepb.Transaction {
	return &lancepb.Transaction{ReadVersion: read, Uuid: "u", Tag: "t1", Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{Fragments: frags}}}
}

func TestApplyAppend(t *testing.T) {
	apRun(t, []apCase{
		{
			name: "ids follow max_fragment_id in order",
			txn:  apAppend(3, apFrag(0, 5), apFrag(0, 7)),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantIDs(t, m, 0, 1, 2, 3, 4)
				apWantMaxID(t, m, 4)
				if apFragByID(m, 3).GetPhysicalRows() != 5 || apFragByID(m, 4).GetPhysicalRows() != 7 {
					t.Errorf("appended fragments out of order")
				}
				if m.GetTag() != "t1" {
					t.Errorf("tag %q; want the transaction's", m.GetTag())
				}
				apWantFlags(t, m, 0, 0)
			},
		},
		{
			name: "ids continue past deleted fragments (high-water mark)",
			head: func() *lancepb.Manifest { m := apBase(); m.MaxFragmentId = proto.Uint32(9); return m }(),
			txn:  apAppend(3, apFrag(0, 5)),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantIDs(t, m, 0, 1, 2, 10)
				apWantMaxID(t, m, 10)
			},
		},
		{
			name: "empty table without max_fragment_id starts at 0",
			head: apManifest(1),
			txn:  apAppend(1, apFrag(0, 5), apFrag(0, 5)),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantIDs(t, m, 0, 1)
				apWantMaxID(t, m, 1)
			},
		},
		{
			name: "an explicit id is kept and sorted into place",
			head: func() *lancepb.Manifest { m := apManifest(3, apFrag(0, 1), apFrag(7, 1)); return m }(),
			txn:  apAppend(3, apFrag(0, 2), apFrag(5, 3)),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantIDs(t, m, 0, 5, 7, 8)
				apWantMaxID(t, m, 8)
			},
		},
		{
			name: "stable row ids: ranges from next_row_id, versions stamped",
			head: apStable(apBase()),
			txn:  apAppend(3, apFrag(0, 5), apFrag(0, 2)),
			check: func(t *testing.T, m *lancepb.Manifest) {
				f3, f4 := apFragByID(m, 3), apFragByID(m, 4)
				if !slices.Equal(f3.GetInlineRowIds(), apRangeIDs(30, 35)) || !slices.Equal(f4.GetInlineRowIds(), apRangeIDs(35, 37)) {
					t.Errorf("row ids %q, %q", f3.GetInlineRowIds(), f4.GetInlineRowIds())
				}
				if !slices.Equal(f3.GetInlineCreatedAtVersions(), apVersions([2]uint64{5, 4})) ||
					!slices.Equal(f3.GetInlineLastUpdatedAtVersions(), apVersions([2]uint64{5, 4})) {
					t.Errorf("version sequences not stamped at version 4")
				}
				if m.GetNextRowId() != 37 {
					t.Errorf("next_row_id %d; want 37", m.GetNextRowId())
				}
				apWantFlags(t, m, table.FlagStableRowIDs, table.FlagStableRowIDs)
			},
		},
		{name: "negative field id", txn: apAppend(3, apFrag(0, 5, apFile("x", 0, -1))), wantErr: table.ErrInvalidTransaction},
		{name: "tombstone in a new file", txn: apAppend(3, apFrag(0, 5, apFile("x", 0, -2))), wantErr: table.ErrInvalidTransaction},
		{name: "explicit id already in use", txn: apAppend(3, apFrag(1, 5)), wantErr: table.ErrInvalidTransaction},
		{name: "duplicate explicit ids", txn: apAppend(3, apFrag(8, 5), apFrag(8, 5)), wantErr: table.ErrInvalidTransaction},
		{
			name:    "column indices do not match fields",
			txn:     apAppend(3, apFrag(0, 5, &lancepb.DataFile{Path: "x", Fields: []int32{0, 1}, ColumnIndices: []int32{0}})),
			wantErr: table.ErrInvalidTransaction,
		},
		{
			name: "appended fragment with an overlay",
			txn: apAppend(3, func() *lancepb.DataFragment {
				f := apFrag(0, 5)
				f.Overlays = []*lancepb.DataOverlayFile{apOverlay("o", []int32{1}, []uint32{0}, 0)}
				return f
			}()),
			wantErr: table.ErrInvalidTransaction,
		},
		{
			name:    "deletion file deletes more rows than there are",
			txn:     apAppend(3, func() *lancepb.DataFragment { f := apFrag(0, 5); f.DeletionFile = apDel(3, 1, 6); return f }()),
			wantErr: table.ErrInvalidTransaction,
		},
		{name: "nil fragment", txn: apAppend(3, nil), wantErr: table.ErrInvalidTransaction},
	})
}

func apDelete(read uint64, deleted []uint64, updated ...*lancepb.DataFragment) *lancepb.Transaction {
	return &lancepb.Transaction{ReadVersion: read, Operation: &lancepb.Transaction_Delete_{Delete: &lancepb.Transaction_Delete{
		UpdatedFragments: updated, DeletedFragmentIds: deleted, Predicate: "id < 3"}}}
}

func apWithDel(f *lancepb.DataFragment, df *lancepb.DeletionFile) *lancepb.DataFragment {
	f = proto.CloneOf(f)
	f.DeletionFile = df
	return f
}

func TestApplyDelete(t *testing.T) {
	apRun(t, []apCase{
		{
			name: "deletion file installed, whole fragment removed",
			txn:  apDelete(3, []uint64{2}, apWithDel(apFrag(0, 10), apDel(3, 42, 3))),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantIDs(t, m, 0, 1)
				apWantMaxID(t, m, 2)
				if !proto.Equal(apFragByID(m, 0).GetDeletionFile(), apDel(3, 42, 3)) {
					t.Errorf("deletion file %v", apFragByID(m, 0).GetDeletionFile())
				}
				apWantFlags(t, m, table.FlagDeletionFiles, table.FlagDeletionFiles)
			},
		},
		{
			name: "deleting the only fragment with a deletion file clears flag 1",
			head: apManifest(3, apWithDel(apFrag(0, 10), apDel(2, 1, 2)), apFrag(1, 10)),
			txn:  apDelete(3, []uint64{0}),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantIDs(t, m, 1)
				apWantMaxID(t, m, 1)
				apWantFlags(t, m, 0, 0)
			},
		},
		{
			name: "deleting every fragment keeps max_fragment_id",
			txn:  apDelete(3, []uint64{0, 1, 2}),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantIDs(t, m)
				apWantMaxID(t, m, 2)
			},
		},
		{name: "unknown deleted fragment", txn: apDelete(3, []uint64{9}), wantErr: table.ErrInvalidTransaction},
		{name: "unknown updated fragment", txn: apDelete(3, nil, apWithDel(apFrag(9, 10), apDel(3, 1, 1))), wantErr: table.ErrInvalidTransaction},
		// As Lance builds the manifest: a repeated id is one removal, and
		// a removed fragment stays removed whatever else names it.
		{
			name: "fragment deleted twice",
			txn:  apDelete(3, []uint64{1, 1}),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantIDs(t, m, 0, 2)
			},
		},
		{
			name: "fragment deleted and updated",
			txn:  apDelete(3, []uint64{1}, apWithDel(apFrag(1, 10), apDel(3, 1, 1))),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantIDs(t, m, 0, 2)
				apWantFlags(t, m, 0, 0)
			},
		},
		{name: "post-image with other row count", txn: apDelete(3, nil, apWithDel(apFrag(1, 11), apDel(3, 1, 1))), wantErr: table.ErrInvalidTransaction},
		{name: "deletes more rows than exist", txn: apDelete(3, nil, apWithDel(apFrag(1, 10), apDel(3, 1, 11))), wantErr: table.ErrInvalidTransaction},
	})
}

func apOverwrite(read uint64, ow *lancepb.Transaction_Overwrite) *lancepb.Transaction {
	return &lancepb.Transaction{ReadVersion: read, Operation: &lancepb.Transaction_Overwrite_{Overwrite: ow}}
}

func TestApplyOverwrite(t *testing.T) {
	newSchema := apSchema()[:2]
	apRun(t, []apCase{
		{
			name: "fragment ids restart at 0, max_fragment_id is a high-water mark",
			head: func() *lancepb.Manifest {
				m := apBase()
				m.Config = map[string]string{"keep": "1", "over": "old"}
				m.SchemaMetadata = map[string][]byte{"old": []byte("x")}
				m.Fragments[0].DeletionFile = apDel(2, 1, 1)
				m.ReaderFeatureFlags, m.WriterFeatureFlags = 1, 1|table.FlagTableConfig
				return m
			}(),
			txn: apOverwrite(3, &lancepb.Transaction_Overwrite{
				Fragments:          []*lancepb.DataFragment{apFrag(0, 4, apFile("n0", 0, 1)), apFrag(0, 6, apFile("n1", 0, 1))},
				Schema:             newSchema,
				SchemaMetadata:     map[string][]byte{"new": []byte("y")},
				ConfigUpsertValues: map[string]string{"over": "new"},
			}),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantIDs(t, m, 0, 1)
				apWantMaxID(t, m, 2)
				if len(m.GetFields()) != 2 {
					t.Errorf("schema not replaced: %d fields", len(m.GetFields()))
				}
				if string(m.GetSchemaMetadata()["new"]) != "y" || m.GetSchemaMetadata()["old"] != nil {
					t.Errorf("schema metadata %v", m.GetSchemaMetadata())
				}
				if m.GetConfig()["keep"] != "1" || m.GetConfig()["over"] != "new" {
					t.Errorf("config %v", m.GetConfig())
				}
				apWantFlags(t, m, 0, table.FlagTableConfig)
				if !proto.Equal(m.GetDataFormat(), apBase().GetDataFormat()) {
					t.Errorf("data format not kept")
				}
			},
		},
		{
			name: "stable row ids continue from next_row_id",
			head: apStable(apBase()),
			txn:  apOverwrite(3, &lancepb.Transaction_Overwrite{Fragments: []*lancepb.DataFragment{apFrag(0, 4)}, Schema: apSchema()}),
			check: func(t *testing.T, m *lancepb.Manifest) {
				if !slices.Equal(apFragByID(m, 0).GetInlineRowIds(), apRangeIDs(30, 34)) || m.GetNextRowId() != 34 {
					t.Errorf("row ids %q, next %d", apFragByID(m, 0).GetInlineRowIds(), m.GetNextRowId())
				}
			},
		},
		{
			name:    "initial_bases on an existing table",
			txn:     apOverwrite(3, &lancepb.Transaction_Overwrite{Schema: apSchema(), InitialBases: []*lancepb.BasePath{{Id: 1, Path: "s3://b"}}}),
			wantErr: table.ErrInvalidTransaction,
		},
		{
			name:    "schema with a negative field id",
			txn:     apOverwrite(3, &lancepb.Transaction_Overwrite{Schema: []*lancepb.Field{{Id: -1, ParentId: -1, Name: "x"}}}),
			wantErr: table.ErrInvalidTransaction,
		},
		{
			name:    "schema with duplicate field ids",
			txn:     apOverwrite(3, &lancepb.Transaction_Overwrite{Schema: []*lancepb.Field{{Id: 1, ParentId: -1}, {Id: 1, ParentId: -1}}}),
			wantErr: table.ErrInvalidTransaction,
		},
	})
}

func TestCreate(t *testing.T) {
	create := apOverwrite(0, &lancepb.Transaction_Overwrite{
		Fragments:          []*lancepb.DataFragment{apFrag(0, 4), apFrag(0, 6)},
		Schema:             apSchema(),
		ConfigUpsertValues: map[string]string{"lance.auto_cleanup.interval": "20"},
		InitialBases:       []*lancepb.BasePath{{Id: 1, Name: proto.String("b1"), Path: "s3://one"}},
	})
	create.Tag = "first"
	m, err := table.Create(create)
	if err != nil {
		t.Fatal(err)
	}
	pb := m.Proto()
	if pb.GetVersion() != 1 || pb.GetTag() != "first" {
		t.Errorf("version %d tag %q", pb.GetVersion(), pb.GetTag())
	}
	apWantIDs(t, pb, 0, 1)
	apWantMaxID(t, pb, 1)
	apWantFlags(t, pb, table.FlagBasePaths, table.FlagBasePaths|table.FlagTableConfig)
	if len(pb.GetBasePaths()) != 1 || !proto.Equal(pb.GetDataFormat(), &lancepb.Manifest_DataStorageFormat{FileFormat: "lance", Version: "2.1"}) {
		t.Errorf("bases %v format %v", pb.GetBasePaths(), pb.GetDataFormat())
	}
	if via, err := table.Apply(t.Context(), nil, create, nil); err != nil || !proto.Equal(via.Proto(), pb) {
		t.Errorf("Apply(nil, …) = %v; differs from Create", err)
	}

	empty, err := table.CreateWith(apOverwrite(0, &lancepb.Transaction_Overwrite{Schema: apSchema()}), table.CreateOptions{StableRowIDs: true})
	if err != nil {
		t.Fatal(err)
	}
	epb := empty.Proto()
	if epb.MaxFragmentId != nil || epb.GetNextRowId() != 0 || len(epb.GetFragments()) != 0 {
		t.Errorf("empty table: max %s next %d", rpOptU32(epb.MaxFragmentId), epb.GetNextRowId())
	}
	apWantFlags(t, epb, table.FlagStableRowIDs, table.FlagStableRowIDs)
	if epb.GetDataFormat().GetVersion() != "2.1" {
		t.Errorf("default data format %v", epb.GetDataFormat())
	}
	next, err := table.Apply(t.Context(), empty, apAppend(1, apFrag(0, 3)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if f := next.Proto().GetFragments()[0]; f.GetId() != 0 || !slices.Equal(f.GetInlineRowIds(), apRangeIDs(0, 3)) {
		t.Errorf("first append into a stable table: %v", rpText(f))
	}

	legacy, err := table.Create(apOverwrite(0, &lancepb.Transaction_Overwrite{Schema: apSchema(),
		Fragments: []*lancepb.DataFragment{apFrag(0, 1, &lancepb.DataFile{Path: "a", Fields: []int32{0}, FileMinorVersion: 2})}}))
	if err != nil || legacy.Header().GetDataFormat().GetVersion() != "0.1" {
		t.Errorf("legacy files: %v, %v", err, legacy)
	}

	for name, c := range map[string]struct {
		txn  *lancepb.Transaction
		want error
	}{
		"read version not 0":      {apOverwrite(3, &lancepb.Transaction_Overwrite{Schema: apSchema()}), table.ErrInvalidTransaction},
		"append":                  {apAppend(0, apFrag(0, 1)), table.ErrInvalidTransaction},
		"clone":                   {&lancepb.Transaction{Operation: &lancepb.Transaction_Clone_{Clone: &lancepb.Transaction_Clone{}}}, table.ErrUnsupportedOperation},
		"no operation":            {&lancepb.Transaction{}, table.ErrUnsupportedOperation},
		"nil":                     {nil, table.ErrInvalidTransaction},
		"duplicate base ids":      {apOverwrite(0, &lancepb.Transaction_Overwrite{Schema: apSchema(), InitialBases: []*lancepb.BasePath{{Id: 1, Path: "a"}, {Id: 1, Path: "b"}}}), table.ErrInvalidTransaction},
		"mixed file versions":     {apOverwrite(0, &lancepb.Transaction_Overwrite{Schema: apSchema(), Fragments: []*lancepb.DataFragment{apFrag(0, 1), apFrag(0, 1, &lancepb.DataFile{Path: "a", Fields: []int32{0}, FileMajorVersion: 2})}}), table.ErrInvalidTransaction},
		"unknown file version":    {apOverwrite(0, &lancepb.Transaction_Overwrite{Schema: apSchema(), Fragments: []*lancepb.DataFragment{apFrag(0, 1, &lancepb.DataFile{Path: "a", Fields: []int32{0}, FileMajorVersion: 9})}}), table.ErrInvalidTransaction},
		"tombstone in a new file": {apOverwrite(0, &lancepb.Transaction_Overwrite{Schema: apSchema(), Fragments: []*lancepb.DataFragment{apFrag(0, 1, apFile("a", -2))}}), table.ErrInvalidTransaction},
	} {
		if _, err := table.Create(c.txn); !errors.Is(err, c.want) {
			t.Errorf("%s: Create error %v; want %v", name, err, c.want)
		}
	}
}

func TestApplyCreateIndex(t *testing.T) {
	idx := func(fields ...int32) *lancepb.Transaction {
		return &lancepb.Transaction{ReadVersion: 3, Operation: &lancepb.Transaction_CreateIndex_{CreateIndex: &lancepb.Transaction_CreateIndex{
			NewIndices: []*lancepb.IndexMetadata{{Uuid: &lancepb.UUID{Uuid: make([]byte, 16)}, Fields: fields, Name: "i", FragmentBitmap: apBitmap(0, 1, 2)}},
		}}}
	}
	badBitmap := idx(1)
	badBitmap.GetCreateIndex().NewIndices[0].FragmentBitmap = []byte{1, 2, 3}
	badUUID := idx(1)
	badUUID.GetCreateIndex().NewIndices[0].Uuid = nil
	apRun(t, []apCase{
		{
			name: "fragments and schema unchanged",
			txn:  idx(1),
			check: func(t *testing.T, m *lancepb.Manifest) {
				want := apBase()
				for i := range want.GetFragments() {
					if !proto.Equal(m.GetFragments()[i], want.GetFragments()[i]) {
						t.Errorf("fragment %d changed", i)
					}
				}
				apWantMaxID(t, m, 2)
			},
		},
		{name: "field not in the schema", txn: idx(7), wantErr: table.ErrInvalidTransaction},
		{name: "negative field", txn: idx(-2), wantErr: table.ErrInvalidTransaction},
		{name: "fragment bitmap does not decode", txn: badBitmap, wantErr: table.ErrInvalidTransaction},
		{name: "no uuid", txn: badUUID, wantErr: table.ErrInvalidTransaction},
	})
}

func apRewrite(read uint64, groups ...*lancepb.Transaction_Rewrite_RewriteGroup) *lancepb.Transaction {
	return &lancepb.Transaction{ReadVersion: read, Operation: &lancepb.Transaction_Rewrite_{Rewrite: &lancepb.Transaction_Rewrite{Groups: groups}}}
}

func apGroup(old []*lancepb.DataFragment, news ...*lancepb.DataFragment) *lancepb.Transaction_Rewrite_RewriteGroup {
	return &lancepb.Transaction_Rewrite_RewriteGroup{OldFragments: old, NewFragments: news}
}

func TestApplyRewrite(t *testing.T) {
	// Fragments 0, 1, 2; id 3 reserved; 4 appended since.
	reserved := func() *lancepb.Manifest {
		m := apManifest(5, apFrag(0, 10), apFrag(1, 10), apFrag(2, 10), apFrag(4, 10))
		return m
	}
	apRun(t, []apCase{
		{
			name: "new fragment sorts by its reserved id, like Lance",
			head: reserved(),
			txn:  apRewrite(4, apGroup([]*lancepb.DataFragment{apFrag(0, 10), apFrag(1, 10)}, apFrag(3, 20))),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantIDs(t, m, 2, 3, 4)
				apWantMaxID(t, m, 4)
			},
		},
		{
			name: "several groups; deletion files compacted away clear flag 1",
			head: apManifest(3, apWithDel(apFrag(0, 10), apDel(1, 1, 1)), apFrag(1, 10), apWithDel(apFrag(2, 10), apDel(1, 2, 2))),
			txn: apRewrite(3,
				apGroup([]*lancepb.DataFragment{apFrag(0, 10)}, apFrag(5, 9)),
				apGroup([]*lancepb.DataFragment{apFrag(2, 10)}, apFrag(6, 8))),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantIDs(t, m, 1, 5, 6)
				apWantMaxID(t, m, 6)
				apWantFlags(t, m, 0, 0)
			},
		},
		{
			name: "deprecated old/new lists; id 0 gets the next id",
			txn: &lancepb.Transaction{ReadVersion: 3, Operation: &lancepb.Transaction_Rewrite_{Rewrite: &lancepb.Transaction_Rewrite{
				OldFragments: []*lancepb.DataFragment{apFrag(1, 10), apFrag(2, 10)},
				NewFragments: []*lancepb.DataFragment{apFrag(0, 20)},
			}}},
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantIDs(t, m, 0, 3)
				if apFragByID(m, 3).GetPhysicalRows() != 20 {
					t.Errorf("new fragment not in place")
				}
			},
		},
		{name: "unknown old fragment", txn: apRewrite(3, apGroup([]*lancepb.DataFragment{apFrag(8, 10)}, apFrag(9, 10))), wantErr: table.ErrInvalidTransaction},
		{
			name:    "fragment in two groups",
			txn:     apRewrite(3, apGroup([]*lancepb.DataFragment{apFrag(1, 10)}, apFrag(5, 10)), apGroup([]*lancepb.DataFragment{apFrag(1, 10)}, apFrag(6, 10))),
			wantErr: table.ErrInvalidTransaction,
		},
		{name: "group without old fragments", txn: apRewrite(3, apGroup(nil, apFrag(5, 10))), wantErr: table.ErrInvalidTransaction},
		{name: "no fragments at all", txn: apRewrite(3), wantErr: table.ErrInvalidTransaction},
		{name: "new id in use", txn: apRewrite(3, apGroup([]*lancepb.DataFragment{apFrag(1, 10)}, apFrag(2, 10))), wantErr: table.ErrInvalidTransaction},
		{name: "new file with a negative field", txn: apRewrite(3, apGroup([]*lancepb.DataFragment{apFrag(1, 10)}, apFrag(5, 10, apFile("x", -1)))), wantErr: table.ErrInvalidTransaction},
	})
}

func apMerge(read uint64, schema []*lancepb.Field, frags ...*lancepb.DataFragment) *lancepb.Transaction {
	return &lancepb.Transaction{ReadVersion: read, Operation: &lancepb.Transaction_Merge_{Merge: &lancepb.Transaction_Merge{Fragments: frags, Schema: schema}}}
}

func apWithFiles(f *lancepb.DataFragment, files ...*lancepb.DataFile) *lancepb.DataFragment {
	f = proto.CloneOf(f)
	f.Files = append(f.Files, files...)
	return f
}

func TestApplyMerge(t *testing.T) {
	wider := append(apSchema(), &lancepb.Field{Id: 4, ParentId: -1, Name: "score", LogicalType: "double", Nullable: true})
	base := apBase()
	added := []*lancepb.DataFragment{
		apWithFiles(base.Fragments[0], apFile("s0", 4)), apWithFiles(base.Fragments[1], apFile("s1", 4)), apWithFiles(base.Fragments[2], apFile("s2", 4)),
	}
	apRun(t, []apCase{
		{
			name: "column added to every fragment, schema replaced",
			txn:  apMerge(3, wider, added...),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantIDs(t, m, 0, 1, 2)
				if len(m.GetFields()) != 5 || len(apFragByID(m, 1).GetFiles()) != 2 {
					t.Errorf("merge not applied")
				}
			},
		},
		{
			name: "unchanged fragments kept; a new fragment may be added; fragments sorted by id",
			txn:  apMerge(3, apSchema(), apFrag(5, 3), base.Fragments[2], base.Fragments[0], base.Fragments[1]),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantIDs(t, m, 0, 1, 2, 5)
				apWantMaxID(t, m, 5)
			},
		},
		{
			name: "stable: rewritten fragments stamped updated, new ones created",
			head: apStable(apBase()),
			txn: func() *lancepb.Transaction {
				s := apStable(apBase())
				nf := apFrag(5, 2)
				nf.RowIdSequence = &lancepb.DataFragment_InlineRowIds{InlineRowIds: apRangeIDs(30, 32)}
				return apMerge(3, wider, apWithFiles(s.Fragments[0], apFile("s0", 4)), s.Fragments[1], s.Fragments[2], nf)
			}(),
			check: func(t *testing.T, m *lancepb.Manifest) {
				if got := apFragByID(m, 0).GetInlineLastUpdatedAtVersions(); !slices.Equal(got, apVersions([2]uint64{10, 4})) {
					t.Errorf("rewritten fragment: last updated %q", got)
				}
				if got := apFragByID(m, 0).GetInlineCreatedAtVersions(); !slices.Equal(got, apVersions([2]uint64{10, 1})) {
					t.Errorf("rewritten fragment: created %q", got)
				}
				if got := apFragByID(m, 1).GetInlineLastUpdatedAtVersions(); !slices.Equal(got, apVersions([2]uint64{10, 1})) {
					t.Errorf("untouched fragment: last updated %q", got)
				}
				if got := apFragByID(m, 5).GetInlineCreatedAtVersions(); !slices.Equal(got, apVersions([2]uint64{2, 4})) {
					t.Errorf("new fragment: created %q", got)
				}
			},
		},
		{
			name: "tombstone allowed in a file the fragment already has",
			head: apManifest(3, apFrag(0, 10, apFile("a", 0, -2), apFile("b", 1))),
			txn:  apMerge(3, apSchema(), apFrag(0, 10, apFile("a", 0, -2), apFile("b", 1), apFile("c", 2))),
		},
		{name: "a fragment dropped", txn: apMerge(3, wider, added[0], added[1]), wantErr: table.ErrInvalidTransaction},
		{name: "row count changed", txn: apMerge(3, wider, added[0], added[1], apWithFiles(apFrag(2, 11), apFile("s2", 4))), wantErr: table.ErrInvalidTransaction},
		{name: "tombstone in a new file", txn: apMerge(3, wider, added[0], added[1], apWithFiles(base.Fragments[2], apFile("s2", -2))), wantErr: table.ErrInvalidTransaction},
		{name: "fragment twice", txn: apMerge(3, wider, added[0], added[1], added[2], added[2]), wantErr: table.ErrInvalidTransaction},
		{name: "stable table, new fragment without row ids", head: apStable(apBase()), txn: apMerge(3, apSchema(), append(apStable(apBase()).Fragments, apFrag(5, 1))...), wantErr: table.ErrInvalidTransaction},
	})
}

func apRestore(read, version uint64) *lancepb.Transaction {
	return &lancepb.Transaction{ReadVersion: read, Operation: &lancepb.Transaction_Restore_{Restore: &lancepb.Transaction_Restore{Version: version}}}
}

func TestApplyRestore(t *testing.T) {
	// Version 2 had fragments 0 and 1 (one with a deletion file); head,
	// version 3, has fragments 0..4.
	v2pb := apManifest(2, apWithDel(apFrag(0, 10), apDel(1, 1, 1)), apFrag(1, 10))
	v2pb.Tag = "v2-tag"
	v2 := apLoad(t, v2pb)
	head := apManifest(3, apFrag(0, 10), apFrag(1, 10), apFrag(2, 10), apFrag(3, 10), apFrag(4, 10))
	versions := rpVersions{2: v2}
	apRun(t, []apCase{
		{
			name:  "older content, new version, max_fragment_id does not go back",
			head:  head,
			txn:   apRestore(3, 2),
			older: versions,
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantIDs(t, m, 0, 1)
				apWantMaxID(t, m, 4)
				apWantFlags(t, m, table.FlagDeletionFiles, table.FlagDeletionFiles)
				if m.GetTag() != "v2-tag" {
					t.Errorf("tag %q; Lance keeps the restored manifest's", m.GetTag())
				}
				if !proto.Equal(apFragByID(m, 0), v2pb.Fragments[0]) {
					t.Errorf("fragment 0 differs from the restored one")
				}
			},
		},
		{
			name: "restoring the head version itself needs no older versions",
			head: head,
			txn:  apRestore(3, 3),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantIDs(t, m, 0, 1, 2, 3, 4)
			},
		},
		{
			name: "stable: next_row_id does not go back",
			head: apStable(apManifest(3, apFrag(0, 10), apFrag(1, 10))),
			txn:  apRestore(3, 2),
			older: rpVersions{2: func() *table.Manifest {
				return apLoad(t, apStable(apManifest(2, apFrag(0, 10))))
			}()},
			check: func(t *testing.T, m *lancepb.Manifest) {
				if m.GetNextRowId() != 20 {
					t.Errorf("next_row_id %d; want 20", m.GetNextRowId())
				}
			},
		},
		{name: "no older versions", head: head, txn: apRestore(3, 2), wantErr: table.ErrVersionNotFound},
		{name: "version not kept", head: head, txn: apRestore(3, 1), older: versions, wantErr: table.ErrVersionNotFound},
		{name: "version from the future", head: head, txn: apRestore(3, 9), older: versions, wantErr: table.ErrInvalidTransaction},
		{name: "version 0", head: head, txn: apRestore(3, 0), older: versions, wantErr: table.ErrInvalidTransaction},
		{name: "versions serve the wrong version", head: head, txn: apRestore(3, 1), older: rpVersions{1: v2}, wantErr: table.ErrVersionNotFound},
	})
}

func TestApplyReserveFragments(t *testing.T) {
	reserve := func(n uint32) *lancepb.Transaction {
		return &lancepb.Transaction{ReadVersion: 3, Operation: &lancepb.Transaction_ReserveFragments_{ReserveFragments: &lancepb.Transaction_ReserveFragments{NumFragments: n}}}
	}
	apRun(t, []apCase{
		{name: "max_fragment_id advances", txn: reserve(3), check: func(t *testing.T, m *lancepb.Manifest) {
			apWantIDs(t, m, 0, 1, 2)
			apWantMaxID(t, m, 5)
		}},
		{name: "then an append uses the next id", txn: reserve(3), check: func(t *testing.T, m *lancepb.Manifest) {
			next, err := table.Apply(t.Context(), apLoad(t, m), apAppend(4, apFrag(0, 1)), nil)
			if err != nil {
				t.Fatal(err)
			}
			apWantIDs(t, next.Proto(), 0, 1, 2, 6)
		}},
		{name: "empty table without max_fragment_id", head: apManifest(1), txn: reserve(2), check: func(t *testing.T, m *lancepb.Manifest) {
			apWantMaxID(t, m, 2)
		}},
		{name: "overflow", head: func() *lancepb.Manifest { m := apBase(); m.MaxFragmentId = proto.Uint32(1<<32 - 2); return m }(), txn: reserve(2), wantErr: table.ErrInvalidTransaction},
	})
}

func apUpdate(read uint64, u *lancepb.Transaction_Update) *lancepb.Transaction {
	return &lancepb.Transaction{ReadVersion: read, Operation: &lancepb.Transaction_Update_{Update: u}}
}

func TestApplyUpdateRewriteRows(t *testing.T) {
	apRun(t, []apCase{
		{
			name: "rows moved: removed, deletion files, new fragments",
			txn: apUpdate(3, &lancepb.Transaction_Update{
				RemovedFragmentIds: []uint64{2},
				UpdatedFragments:   []*lancepb.DataFragment{apWithDel(apFrag(0, 10), apDel(3, 5, 4))},
				NewFragments:       []*lancepb.DataFragment{apFrag(0, 14)},
				FieldsModified:     []uint32{2},
			}),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantIDs(t, m, 0, 1, 3)
				apWantMaxID(t, m, 3)
				if !proto.Equal(apFragByID(m, 0).GetDeletionFile(), apDel(3, 5, 4)) || apFragByID(m, 3).GetPhysicalRows() != 14 {
					t.Errorf("update not applied")
				}
				apWantFlags(t, m, table.FlagDeletionFiles, table.FlagDeletionFiles)
			},
		},
		{
			name: "stable: moved rows keep created-at, inserted rows are new, missing ids filled",
			head: func() *lancepb.Manifest {
				m := apStable(apBase()) // row ids 0-9, 10-19, 20-29
				m.Fragments[1].CreatedAtVersionSequence = &lancepb.DataFragment_InlineCreatedAtVersions{InlineCreatedAtVersions: apVersions([2]uint64{10, 2})}
				return m
			}(),
			txn: func() *lancepb.Transaction {
				moved := apFrag(0, 6)
				// Rows 8, 9 (created v1) and 10, 11 (created v2) moved; two inserted.
				moved.RowIdSequence = &lancepb.DataFragment_InlineRowIds{InlineRowIds: apRangeIDs(8, 12)}
				return apUpdate(3, &lancepb.Transaction_Update{
					UpdatedFragments: []*lancepb.DataFragment{apWithDel(apStable(apBase()).Fragments[0], apDel(3, 1, 2)), apWithDel(apStable(apBase()).Fragments[1], apDel(3, 2, 2))},
					NewFragments:     []*lancepb.DataFragment{moved},
				})
			}(),
			check: func(t *testing.T, m *lancepb.Manifest) {
				f := apFragByID(m, 3)
				// 8..11 then 30, 31: one range with holes would cost 24+4*18,
				// a bitmap 24+3, a sorted array 24+12: a bitmap.
				if m.GetNextRowId() != 32 {
					t.Errorf("next_row_id %d; want 32", m.GetNextRowId())
				}
				if got, want := f.GetInlineCreatedAtVersions(), apVersions([2]uint64{2, 1}, [2]uint64{2, 2}, [2]uint64{2, 4}); !slices.Equal(got, want) {
					t.Errorf("created-at %q; want %q", got, want)
				}
				if got, want := f.GetInlineLastUpdatedAtVersions(), apVersions([2]uint64{6, 4}); !slices.Equal(got, want) {
					t.Errorf("last-updated %q; want %q", got, want)
				}
				if ids := f.GetInlineRowIds(); len(ids) == 0 || slices.Equal(ids, apRangeIDs(8, 12)) {
					t.Errorf("row ids not filled: %q", ids)
				}
			},
		},
		{name: "unknown removed fragment", txn: apUpdate(3, &lancepb.Transaction_Update{RemovedFragmentIds: []uint64{7}}), wantErr: table.ErrInvalidTransaction},
		{name: "unknown updated fragment", txn: apUpdate(3, &lancepb.Transaction_Update{UpdatedFragments: []*lancepb.DataFragment{apFrag(7, 10)}}), wantErr: table.ErrInvalidTransaction},
		// As Lance builds the manifest: a removed fragment stays removed
		// (a rebased update names a fragment a concurrent delete emptied
		// both ways), and of two post-images of one fragment the first
		// counts.
		{
			name: "removed and updated",
			txn: apUpdate(3, &lancepb.Transaction_Update{RemovedFragmentIds: []uint64{1},
				UpdatedFragments: []*lancepb.DataFragment{apWithDel(apFrag(1, 10), apDel(3, 1, 3))}}),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantIDs(t, m, 0, 2)
				apWantFlags(t, m, 0, 0)
			},
		},
		{
			name: "updated twice",
			txn: apUpdate(3, &lancepb.Transaction_Update{UpdatedFragments: []*lancepb.DataFragment{
				apWithDel(apFrag(1, 10), apDel(3, 1, 2)), apWithDel(apFrag(1, 10), apDel(3, 2, 5))}}),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantIDs(t, m, 0, 1, 2)
				if got := apFragByID(m, 1).GetDeletionFile(); !proto.Equal(got, apDel(3, 1, 2)) {
					t.Errorf("fragment 1's deletion file %v, want the first post-image's", got)
				}
			},
		},
		{name: "new fragment with a tombstone", txn: apUpdate(3, &lancepb.Transaction_Update{NewFragments: []*lancepb.DataFragment{apFrag(0, 1, apFile("x", -2, 1))}}), wantErr: table.ErrInvalidTransaction},
		{name: "fields_modified out of range", txn: apUpdate(3, &lancepb.Transaction_Update{FieldsModified: []uint32{1 << 31}}), wantErr: table.ErrInvalidTransaction},
		{name: "unknown update mode", txn: apUpdate(3, &lancepb.Transaction_Update{UpdateMode: 7}), wantErr: table.ErrInvalidTransaction},
		{
			name: "stable: more row ids than rows",
			head: apStable(apBase()),
			txn: apUpdate(3, &lancepb.Transaction_Update{NewFragments: []*lancepb.DataFragment{func() *lancepb.DataFragment {
				f := apFrag(0, 2)
				f.RowIdSequence = &lancepb.DataFragment_InlineRowIds{InlineRowIds: apRangeIDs(0, 3)}
				return f
			}()}}),
			wantErr: table.ErrInvalidTransaction,
		},
		{
			name: "stable: malformed row ids",
			head: apStable(apBase()),
			txn: apUpdate(3, &lancepb.Transaction_Update{NewFragments: []*lancepb.DataFragment{func() *lancepb.DataFragment {
				f := apFrag(0, 2)
				f.RowIdSequence = &lancepb.DataFragment_InlineRowIds{InlineRowIds: []byte{0x0a, 0x05, 0x01}}
				return f
			}()}}),
			wantErr: table.ErrInvalidTransaction,
		},
	})
}

func TestApplyUpdateRewriteColumns(t *testing.T) {
	// Fragment 1 has [0 1] [2 3] and two overlays on field 2: one committed
	// at version 2 (before the update read version 3), one at version 4
	// (after it). Head is version 4.
	head := func() *lancepb.Manifest {
		m := apManifest(4, apFrag(0, 10), apFrag(1, 10, apFile("a", 0, 1), apFile("b", 2, 3)))
		m.Fragments[1].DeletionFile = apDel(4, 9, 1)
		m.Fragments[1].Overlays = []*lancepb.DataOverlayFile{
			apOverlay("o-old", []int32{2}, []uint32{1}, 2),
			apOverlay("o-mixed", []int32{1, 2}, []uint32{1}, 2),
			apOverlay("o-new", []int32{2}, []uint32{2}, 4),
		}
		return m
	}
	postImage := func() *lancepb.DataFragment {
		// Built at version 3: no deletion file yet, "b" tombstoned, new file.
		f := apFrag(1, 10, apFile("a", 0, 1), apFile("b", -2, 3), apFile("c", 2))
		return f
	}
	cols := func(u *lancepb.Transaction_Update) *lancepb.Transaction {
		u.UpdateMode = lancepb.Transaction_REWRITE_COLUMNS
		return apUpdate(3, u)
	}
	apRun(t, []apCase{
		{
			name: "new file added, field tombstoned, head deletion file and newer overlay kept",
			head: head(),
			txn:  cols(&lancepb.Transaction_Update{UpdatedFragments: []*lancepb.DataFragment{postImage()}, FieldsModified: []uint32{2}}),
			check: func(t *testing.T, m *lancepb.Manifest) {
				f := apFragByID(m, 1)
				apWantPaths(t, f, "a", "b", "c")
				apWantFields(t, f.GetFiles()[1], -2, 3)
				apWantFields(t, f.GetFiles()[2], 2)
				if !proto.Equal(f.GetDeletionFile(), apDel(4, 9, 1)) {
					t.Errorf("deletion file %v; REWRITE_COLUMNS keeps head's", f.GetDeletionFile())
				}
				var paths []string
				for _, o := range f.GetOverlays() {
					paths = append(paths, o.GetDataFile().GetPath())
				}
				if !slices.Equal(paths, []string{"o-mixed", "o-new"}) {
					t.Errorf("overlays %v; want o-mixed (field 2 tombstoned), o-new", paths)
				}
				apWantFields(t, f.GetOverlays()[0].GetDataFile(), 1, -2)
				apWantFields(t, f.GetOverlays()[1].GetDataFile(), 2)
				apWantFlags(t, m, table.FlagDeletionFiles|table.FlagDataOverlays, table.FlagDeletionFiles|table.FlagDataOverlays)
			},
		},
		{
			name: "a file left with only tombstones is dropped",
			head: apManifest(3, apFrag(0, 10, apFile("a", 0, 1), apFile("b", 2))),
			txn:  cols(&lancepb.Transaction_Update{UpdatedFragments: []*lancepb.DataFragment{apFrag(0, 10, apFile("a", 0, 1), apFile("c", 2))}, FieldsModified: []uint32{2}}),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantPaths(t, apFragByID(m, 0), "a", "c")
			},
		},
		{
			name: "stable: rewritten rows stamped updated",
			head: apStable(apManifest(3, apFrag(0, 10, apFile("a", 0, 1), apFile("b", 2, 3)))),
			txn: func() *lancepb.Transaction {
				p := apStable(apManifest(3, apFrag(0, 10, apFile("a", 0, 1), apFile("b", -2, 3), apFile("c", 2)))).Fragments[0]
				return cols(&lancepb.Transaction_Update{UpdatedFragments: []*lancepb.DataFragment{p}, FieldsModified: []uint32{2},
					UpdatedFragmentOffsetBitmaps: map[uint64][]byte{0: apBitmap(2, 3, 9)}})
			}(),
			check: func(t *testing.T, m *lancepb.Manifest) {
				got := apFragByID(m, 0).GetInlineLastUpdatedAtVersions()
				want := apVersions([2]uint64{2, 1}, [2]uint64{2, 4}, [2]uint64{5, 1}, [2]uint64{1, 4})
				if !slices.Equal(got, want) {
					t.Errorf("last-updated %q; want %q", got, want)
				}
			},
		},
		{
			name: "stable: deprecated offset lists",
			head: apStable(apManifest(3, apFrag(0, 4, apFile("a", 0, 1), apFile("b", 2, 3)))),
			txn: func() *lancepb.Transaction {
				p := apStable(apManifest(3, apFrag(0, 4, apFile("a", 0, 1), apFile("b", -2, 3), apFile("c", 2)))).Fragments[0]
				return cols(&lancepb.Transaction_Update{UpdatedFragments: []*lancepb.DataFragment{p}, FieldsModified: []uint32{2},
					UpdatedFragmentOffsets: map[uint64]*lancepb.Transaction_UInt32List{0: {Values: []uint32{0}}}})
			}(),
			check: func(t *testing.T, m *lancepb.Manifest) {
				if got, want := apFragByID(m, 0).GetInlineLastUpdatedAtVersions(), apVersions([2]uint64{1, 4}, [2]uint64{3, 1}); !slices.Equal(got, want) {
					t.Errorf("last-updated %q; want %q", got, want)
				}
			},
		},
		{
			name:    "offsets for a fragment the update does not change",
			txn:     cols(&lancepb.Transaction_Update{UpdatedFragmentOffsetBitmaps: map[uint64][]byte{1: apBitmap(0)}}),
			wantErr: table.ErrInvalidTransaction,
		},
		{
			name:    "offsets past the fragment",
			txn:     cols(&lancepb.Transaction_Update{UpdatedFragments: []*lancepb.DataFragment{apFrag(1, 10)}, UpdatedFragmentOffsetBitmaps: map[uint64][]byte{1: apBitmap(10)}}),
			wantErr: table.ErrInvalidTransaction,
		},
		{
			name:    "offsets that do not decode",
			txn:     cols(&lancepb.Transaction_Update{UpdatedFragments: []*lancepb.DataFragment{apFrag(1, 10)}, UpdatedFragmentOffsetBitmaps: map[uint64][]byte{1: {9, 9}}}),
			wantErr: table.ErrInvalidTransaction,
		},
		{
			name:    "new file holds a field outside the schema",
			txn:     cols(&lancepb.Transaction_Update{UpdatedFragments: []*lancepb.DataFragment{apFrag(1, 10, apFile("f1.lance", 0, 1, 2, 3), apFile("c", 2, 9))}, FieldsModified: []uint32{2, 9}}),
			wantErr: table.ErrInvalidTransaction,
		},
		{
			name:    "new file but no fields_modified",
			txn:     cols(&lancepb.Transaction_Update{UpdatedFragments: []*lancepb.DataFragment{apFrag(1, 10, apFile("f1.lance", 0, 1, -2, 3), apFile("c", 2))}}),
			wantErr: table.ErrInvalidTransaction,
		},
		{
			name: "a file holding fields not listed as modified is not taken as new",
			head: head(),
			txn: cols(&lancepb.Transaction_Update{
				UpdatedFragments: []*lancepb.DataFragment{apFrag(1, 10, apFile("a", 0, 1), apFile("b-stale", 2, 3), apFile("c", 2))},
				FieldsModified:   []uint32{2},
			}),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantPaths(t, apFragByID(m, 1), "a", "b", "c")
			},
		},
		{
			name: "REWRITE_ROWS writes no data file into an existing fragment",
			head: head(),
			txn: apUpdate(3, &lancepb.Transaction_Update{
				UpdatedFragments: []*lancepb.DataFragment{apWithDel(apFrag(1, 10, apFile("a", 0, 1), apFile("b", -2, 3), apFile("c", 2)), apDel(3, 1, 2))},
				FieldsModified:   []uint32{2},
			}),
			check: func(t *testing.T, m *lancepb.Manifest) {
				f := apFragByID(m, 1)
				apWantPaths(t, f, "a", "b")
				if !proto.Equal(f.GetDeletionFile(), apDel(3, 1, 2)) || len(f.GetOverlays()) != 3 {
					t.Errorf("fragment %v", rpText(f))
				}
			},
		},
	})
}

func apProject(read uint64, schema []*lancepb.Field) *lancepb.Transaction {
	return &lancepb.Transaction{ReadVersion: read, Operation: &lancepb.Transaction_Project_{Project: &lancepb.Transaction_Project{Schema: schema}}}
}

func TestApplyProject(t *testing.T) {
	head := func() *lancepb.Manifest {
		m := apManifest(3,
			apFrag(0, 10, apFile("a", 0, 1), apFile("b", 2, 3)),
			apFrag(1, 10, apFile("c", 0, 1, 2, 3)),
			apFrag(2, 10, apFile("d", 0, 1), apFile("e", -2, 3), apFile("g", 2)))
		m.SchemaMetadata = map[string][]byte{"k": []byte("v")}
		return m
	}
	renamed := apSchema()
	renamed[1].Name = "label"
	apRun(t, []apCase{
		{
			name: "drop field 3: files with no live field pruned, tombstones count as dead",
			head: head(),
			txn:  apProject(3, apSchema()[:3]),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantPaths(t, apFragByID(m, 0), "a", "b")
				apWantPaths(t, apFragByID(m, 1), "c")
				apWantPaths(t, apFragByID(m, 2), "d", "g")
				if len(m.GetFields()) != 3 || string(m.GetSchemaMetadata()["k"]) != "v" {
					t.Errorf("schema %d fields, metadata %v", len(m.GetFields()), m.GetSchemaMetadata())
				}
			},
		},
		{
			name: "drop fields 2 and 3",
			head: head(),
			txn:  apProject(3, apSchema()[:2]),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantPaths(t, apFragByID(m, 0), "a")
				apWantPaths(t, apFragByID(m, 2), "d")
			},
		},
		{
			name: "rename keeps every file",
			head: head(),
			txn:  apProject(3, renamed),
			check: func(t *testing.T, m *lancepb.Manifest) {
				if m.GetFields()[1].GetName() != "label" {
					t.Errorf("not renamed")
				}
				apWantPaths(t, apFragByID(m, 2), "d", "e", "g")
			},
		},
		{name: "unknown parent", txn: apProject(3, []*lancepb.Field{{Id: 1, ParentId: 7}}), wantErr: table.ErrInvalidTransaction},
	})
}

func apConfig(u *lancepb.Transaction_UpdateConfig) *lancepb.Transaction {
	return &lancepb.Transaction{ReadVersion: 3, Operation: &lancepb.Transaction_UpdateConfig_{UpdateConfig: u}}
}

func apEntry(k string, v ...string) *lancepb.Transaction_UpdateMapEntry {
	e := &lancepb.Transaction_UpdateMapEntry{Key: k}
	if len(v) > 0 {
		e.Value = proto.String(v[0])
	}
	return e
}

func TestApplyUpdateConfig(t *testing.T) {
	head := func() *lancepb.Manifest {
		m := apBase()
		m.Config = map[string]string{"a": "1", "b": "2"}
		m.TableMetadata = map[string]string{"owner": "x"}
		m.SchemaMetadata = map[string][]byte{"s": []byte("1")}
		m.Fields[1].Metadata = map[string][]byte{"m": []byte("1")}
		m.WriterFeatureFlags = table.FlagTableConfig
		return m
	}
	apRun(t, []apCase{
		{
			name: "update maps: set, delete, replace",
			head: head(),
			txn: apConfig(&lancepb.Transaction_UpdateConfig{
				ConfigUpdates:         &lancepb.Transaction_UpdateMap{UpdateEntries: []*lancepb.Transaction_UpdateMapEntry{apEntry("a"), apEntry("c", "3"), apEntry("c", "4")}},
				TableMetadataUpdates:  &lancepb.Transaction_UpdateMap{UpdateEntries: []*lancepb.Transaction_UpdateMapEntry{apEntry("team", "y")}, Replace: true},
				SchemaMetadataUpdates: &lancepb.Transaction_UpdateMap{UpdateEntries: []*lancepb.Transaction_UpdateMapEntry{apEntry("s")}},
				FieldMetadataUpdates:  map[int32]*lancepb.Transaction_UpdateMap{1: {UpdateEntries: []*lancepb.Transaction_UpdateMapEntry{apEntry("n", "2")}}},
			}),
			check: func(t *testing.T, m *lancepb.Manifest) {
				if !rpMapsEqual(m.GetConfig(), map[string]string{"b": "2", "c": "4"}) {
					t.Errorf("config %v", m.GetConfig())
				}
				if !rpMapsEqual(m.GetTableMetadata(), map[string]string{"team": "y"}) {
					t.Errorf("table metadata %v", m.GetTableMetadata())
				}
				if len(m.GetSchemaMetadata()) != 0 {
					t.Errorf("schema metadata %v", m.GetSchemaMetadata())
				}
				md := m.GetFields()[1].GetMetadata()
				if string(md["m"]) != "1" || string(md["n"]) != "2" {
					t.Errorf("field metadata %v", md)
				}
				apWantFlags(t, m, 0, table.FlagTableConfig)
			},
		},
		{
			name: "removing the last config key clears flag 8",
			head: head(),
			txn:  apConfig(&lancepb.Transaction_UpdateConfig{ConfigUpdates: &lancepb.Transaction_UpdateMap{Replace: true}}),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantFlags(t, m, 0, 0)
			},
		},
		{
			name: "deprecated forms",
			head: head(),
			txn: apConfig(&lancepb.Transaction_UpdateConfig{
				UpsertValues:   map[string]string{"z": "9", "b": "3"},
				DeleteKeys:     []string{"a", "z"},
				SchemaMetadata: map[string]string{"t": "2"},
				FieldMetadata:  map[uint32]*lancepb.Transaction_UpdateConfig_FieldMetadataUpdate{1: {Metadata: map[string]string{"n": "2"}}},
			}),
			check: func(t *testing.T, m *lancepb.Manifest) {
				if !rpMapsEqual(m.GetConfig(), map[string]string{"b": "3"}) {
					t.Errorf("config %v", m.GetConfig())
				}
				if len(m.GetSchemaMetadata()) != 1 || string(m.GetSchemaMetadata()["t"]) != "2" {
					t.Errorf("schema metadata %v (replaced)", m.GetSchemaMetadata())
				}
				if md := m.GetFields()[1].GetMetadata(); len(md) != 1 || string(md["n"]) != "2" {
					t.Errorf("field metadata %v (replaced)", md)
				}
			},
		},
		{
			name: "nothing to update",
			head: head(),
			txn:  apConfig(&lancepb.Transaction_UpdateConfig{}),
			check: func(t *testing.T, m *lancepb.Manifest) {
				if !rpMapsEqual(m.GetConfig(), head().GetConfig()) {
					t.Errorf("config changed")
				}
			},
		},
		{
			name:    "both forms",
			txn:     apConfig(&lancepb.Transaction_UpdateConfig{UpsertValues: map[string]string{"a": "1"}, ConfigUpdates: &lancepb.Transaction_UpdateMap{}}),
			wantErr: table.ErrInvalidTransaction,
		},
		{
			name:    "unknown field",
			txn:     apConfig(&lancepb.Transaction_UpdateConfig{FieldMetadataUpdates: map[int32]*lancepb.Transaction_UpdateMap{9: {}}}),
			wantErr: table.ErrInvalidTransaction,
		},
		{
			name:    "unknown field, deprecated form",
			txn:     apConfig(&lancepb.Transaction_UpdateConfig{FieldMetadata: map[uint32]*lancepb.Transaction_UpdateConfig_FieldMetadataUpdate{9: {}}}),
			wantErr: table.ErrInvalidTransaction,
		},
		{
			name:    "field id out of range, deprecated form",
			txn:     apConfig(&lancepb.Transaction_UpdateConfig{FieldMetadata: map[uint32]*lancepb.Transaction_UpdateConfig_FieldMetadataUpdate{1 << 31: {}}}),
			wantErr: table.ErrInvalidTransaction,
		},
	})
}

func apReplace(read uint64, groups ...*lancepb.Transaction_DataReplacementGroup) *lancepb.Transaction {
	return &lancepb.Transaction{ReadVersion: read, Operation: &lancepb.Transaction_DataReplacement_{DataReplacement: &lancepb.Transaction_DataReplacement{Replacements: groups}}}
}

func apRepl(frag uint64, df *lancepb.DataFile) *lancepb.Transaction_DataReplacementGroup {
	return &lancepb.Transaction_DataReplacementGroup{FragmentId: frag, NewFile: df}
}

func TestApplyDataReplacement(t *testing.T) {
	head := func() *lancepb.Manifest {
		m := apManifest(4,
			apFrag(0, 10, apFile("a", 0, 1), apFile("b", 2)),
			apFrag(1, 10, apFile("c", 0, 1, 2)),
			apFrag(2, 10, apFile("d", 0, 1)),
			apFrag(3, 10, &lancepb.DataFile{Path: "legacy", Fields: []int32{0, 1, 2}}))
		m.Fragments[0].Overlays = []*lancepb.DataOverlayFile{
			apOverlay("o-old", []int32{2}, []uint32{1}, 2),
			apOverlay("o-mixed", []int32{1, 2}, []uint32{1}, 3),
			apOverlay("o-new", []int32{2}, []uint32{1}, 4),
		}
		return m
	}
	newFile := func(path string) *lancepb.DataFile { f := apFile(path, 2); f.FileSizeBytes = 55; return f }
	apRun(t, []apCase{
		{
			name: "in place: path and size swapped, older overlays superseded, newer kept",
			head: head(),
			txn:  apReplace(3, apRepl(0, newFile("b2"))),
			check: func(t *testing.T, m *lancepb.Manifest) {
				f := apFragByID(m, 0)
				apWantPaths(t, f, "a", "b2")
				if f.GetFiles()[1].GetFileSizeBytes() != 55 {
					t.Errorf("size not replaced")
				}
				var paths []string
				for _, o := range f.GetOverlays() {
					paths = append(paths, o.GetDataFile().GetPath())
				}
				if !slices.Equal(paths, []string{"o-mixed", "o-new"}) {
					t.Errorf("overlays %v", paths)
				}
				apWantFields(t, f.GetOverlays()[0].GetDataFile(), 1, -2)
			},
		},
		{
			name: "field held in a wider file: tombstoned there, new file added",
			head: head(),
			txn:  apReplace(3, apRepl(1, newFile("c2"))),
			check: func(t *testing.T, m *lancepb.Manifest) {
				f := apFragByID(m, 1)
				apWantPaths(t, f, "c", "c2")
				apWantFields(t, f.GetFiles()[0], 0, 1, -2)
			},
		},
		{
			name: "all-NULL field: new file added",
			head: head(),
			txn:  apReplace(3, apRepl(2, newFile("d2"))),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantPaths(t, apFragByID(m, 2), "d", "d2")
			},
		},
		{
			name: "several fragments",
			head: head(),
			txn:  apReplace(3, apRepl(1, newFile("c2")), apRepl(2, newFile("d2"))),
			check: func(t *testing.T, m *lancepb.Manifest) {
				apWantPaths(t, apFragByID(m, 1), "c", "c2")
				apWantPaths(t, apFragByID(m, 2), "d", "d2")
			},
		},
		{
			name: "stable: every row stamped updated",
			head: apStable(apManifest(3, apFrag(0, 4, apFile("a", 0, 1), apFile("b", 2)))),
			txn:  apReplace(3, apRepl(0, newFile("b2"))),
			check: func(t *testing.T, m *lancepb.Manifest) {
				if got := apFragByID(m, 0).GetInlineLastUpdatedAtVersions(); !slices.Equal(got, apVersions([2]uint64{4, 4})) {
					t.Errorf("last-updated %q", got)
				}
			},
		},
		{name: "field not in the schema", head: head(), txn: apReplace(3, apRepl(0, apFile("x", 9))), wantErr: table.ErrInvalidTransaction},
		{name: "negative field", head: head(), txn: apReplace(3, apRepl(0, apFile("x", -2))), wantErr: table.ErrInvalidTransaction},
		{name: "no field", head: head(), txn: apReplace(3, apRepl(0, apFile("x"))), wantErr: table.ErrInvalidTransaction},
		{name: "different fields per group", head: head(), txn: apReplace(3, apRepl(0, newFile("x")), apRepl(1, apFile("y", 1))), wantErr: table.ErrInvalidTransaction},
		{name: "unknown fragment", head: head(), txn: apReplace(3, apRepl(9, newFile("x"))), wantErr: table.ErrInvalidTransaction},
		{name: "fragment twice", head: head(), txn: apReplace(3, apRepl(1, newFile("x")), apRepl(1, newFile("y"))), wantErr: table.ErrInvalidTransaction},
		{name: "no new file", head: head(), txn: apReplace(3, apRepl(1, nil)), wantErr: table.ErrInvalidTransaction},
		{name: "field in a legacy file", head: head(), txn: apReplace(3, apRepl(3, newFile("x"))), wantErr: table.ErrInvalidTransaction},
		{
			name:    "partly held fields (mixed layout)",
			head:    head(),
			txn:     apReplace(3, apRepl(2, apFile("x", 1, 2))),
			wantErr: table.ErrInvalidTransaction,
		},
		{
			name:    "replacement that changes nothing",
			head:    head(),
			txn:     apReplace(3, apRepl(0, apFile("b", 2))),
			wantErr: table.ErrInvalidTransaction,
		},
	})
}

func apOverlayTxn(read uint64, groups ...*lancepb.Transaction_DataOverlayGroup) *lancepb.Transaction {
	return &lancepb.Transaction{ReadVersion: read, Operation: &lancepb.Transaction_DataOverlay_{DataOverlay: &lancepb.Transaction_DataOverlay{Groups: groups}}}
}

func apOvg(frag uint64, overlays ...*lancepb.DataOverlayFile) *lancepb.Transaction_DataOverlayGroup {
	return &lancepb.Transaction_DataOverlayGroup{FragmentId: frag, Overlays: overlays}
}

func TestApplyDataOverlay(t *testing.T) {
	sparse := &lancepb.DataOverlayFile{
		DataFile: apFile("sp", 1, 2),
		Coverage: &lancepb.DataOverlayFile_FieldCoverage{FieldCoverage: &lancepb.FieldCoverage{OffsetBitmaps: [][]byte{apBitmap(0), apBitmap(3, 9)}}},
	}
	bad := func(mut func(o *lancepb.DataOverlayFile)) *lancepb.Transaction {
		o := apOverlay("x", []int32{1}, []uint32{0}, 0)
		mut(o)
		return apOverlayTxn(3, apOvg(1, o))
	}
	apRun(t, []apCase{
		{
			name: "appended and stamped with the new version; flag 64",
			head: func() *lancepb.Manifest {
				m := apBase()
				m.Fragments[1].Overlays = []*lancepb.DataOverlayFile{apOverlay("old", []int32{2}, []uint32{5}, 2)}
				m.ReaderFeatureFlags, m.WriterFeatureFlags = table.FlagDataOverlays, table.FlagDataOverlays
				return m
			}(),
			txn: apOverlayTxn(3, apOvg(1, apOverlay("x", []int32{1}, []uint32{0, 9}, 0)), apOvg(0, sparse), apOvg(1, apOverlay("y", []int32{2}, []uint32{1}, 77))),
			check: func(t *testing.T, m *lancepb.Manifest) {
				var got []string
				for _, o := range apFragByID(m, 1).GetOverlays() {
					got = append(got, fmt.Sprintf("%s@%d", o.GetDataFile().GetPath(), o.GetCommittedVersion()))
				}
				if !slices.Equal(got, []string{"old@2", "x@4", "y@4"}) {
					t.Errorf("overlays %v", got)
				}
				if len(apFragByID(m, 0).GetOverlays()) != 1 {
					t.Errorf("sparse overlay not added")
				}
				apWantFlags(t, m, table.FlagDataOverlays, table.FlagDataOverlays)
			},
		},
		{name: "unknown fragment", txn: apOverlayTxn(3, apOvg(9, apOverlay("x", []int32{1}, []uint32{0}, 0))), wantErr: table.ErrInvalidTransaction},
		{name: "offset past the fragment", txn: apOverlayTxn(3, apOvg(1, apOverlay("x", []int32{1}, []uint32{10}, 0))), wantErr: table.ErrInvalidTransaction},
		{name: "bitmap does not decode", txn: bad(func(o *lancepb.DataOverlayFile) {
			o.Coverage = &lancepb.DataOverlayFile_SharedOffsetBitmap{SharedOffsetBitmap: []byte{0x3a, 0x30, 0, 0, 9}}
		}), wantErr: table.ErrInvalidTransaction},
		{name: "no coverage", txn: bad(func(o *lancepb.DataOverlayFile) { o.Coverage = nil }), wantErr: table.ErrInvalidTransaction},
		{name: "sparse coverage count differs", txn: bad(func(o *lancepb.DataOverlayFile) {
			o.Coverage = &lancepb.DataOverlayFile_FieldCoverage{FieldCoverage: &lancepb.FieldCoverage{OffsetBitmaps: [][]byte{apBitmap(0), apBitmap(1)}}}
		}), wantErr: table.ErrInvalidTransaction},
		{name: "field not in the schema", txn: bad(func(o *lancepb.DataOverlayFile) { o.DataFile.Fields = []int32{8} }), wantErr: table.ErrInvalidTransaction},
		{name: "tombstone field", txn: bad(func(o *lancepb.DataOverlayFile) { o.DataFile.Fields = []int32{-2} }), wantErr: table.ErrInvalidTransaction},
		{name: "no data file", txn: bad(func(o *lancepb.DataOverlayFile) { o.DataFile = nil }), wantErr: table.ErrInvalidTransaction},
		{name: "nil overlay", txn: apOverlayTxn(3, apOvg(1, nil)), wantErr: table.ErrInvalidTransaction},
	})
}

func TestApplyUpdateBases(t *testing.T) {
	bases := func(bs ...*lancepb.BasePath) *lancepb.Transaction {
		return &lancepb.Transaction{ReadVersion: 3, Operation: &lancepb.Transaction_UpdateBases_{UpdateBases: &lancepb.Transaction_UpdateBases{NewBases: bs}}}
	}
	head := func() *lancepb.Manifest {
		m := apBase()
		m.BasePaths = []*lancepb.BasePath{{Id: 3, Name: proto.String("one"), Path: "s3://one"}}
		return m
	}
	apRun(t, []apCase{
		{
			name: "id assigned after the largest; flag 16",
			head: head(),
			txn:  bases(&lancepb.BasePath{Name: proto.String("two"), Path: "s3://two"}, &lancepb.BasePath{Id: 9, Name: proto.String("three"), Path: "s3://three"}),
			check: func(t *testing.T, m *lancepb.Manifest) {
				var ids []uint32
				for _, b := range m.GetBasePaths() {
					ids = append(ids, b.GetId())
				}
				if !slices.Equal(ids, []uint32{3, 4, 9}) {
					t.Errorf("base ids %v", ids)
				}
				apWantFlags(t, m, table.FlagBasePaths, table.FlagBasePaths)
			},
		},
		{name: "name taken", head: head(), txn: bases(&lancepb.BasePath{Name: proto.String("one"), Path: "s3://x"}), wantErr: table.ErrInvalidTransaction},
		{name: "path taken", head: head(), txn: bases(&lancepb.BasePath{Name: proto.String("x"), Path: "s3://one"}), wantErr: table.ErrInvalidTransaction},
		{name: "id taken", head: head(), txn: bases(&lancepb.BasePath{Id: 3, Name: proto.String("x"), Path: "s3://x"}), wantErr: table.ErrInvalidTransaction},
	})
}

func TestApplyUnsupported(t *testing.T) {
	unknownTag := &lancepb.Transaction{ReadVersion: 3}
	unknownTag.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, 150, protowire.BytesType), nil))
	apRun(t, []apCase{
		{name: "UpdateMemWalState", txn: &lancepb.Transaction{Operation: &lancepb.Transaction_UpdateMemWalState_{UpdateMemWalState: &lancepb.Transaction_UpdateMemWalState{}}}, wantErr: table.ErrUnsupportedOperation},
		{name: "AppendFragmentReuseTransitions", txn: &lancepb.Transaction{Operation: &lancepb.Transaction_AppendFriTransitions{AppendFriTransitions: &lancepb.Transaction_AppendFragmentReuseTransitions{}}}, wantErr: table.ErrUnsupportedOperation},
		{name: "Clone", txn: &lancepb.Transaction{Operation: &lancepb.Transaction_Clone_{Clone: &lancepb.Transaction_Clone{}}}, wantErr: table.ErrUnsupportedOperation},
		{name: "no operation", txn: &lancepb.Transaction{ReadVersion: 3}, wantErr: table.ErrUnsupportedOperation},
		{name: "unknown operation tag", txn: unknownTag, wantErr: table.ErrUnsupportedOperation},
	})
	if _, err := table.Apply(t.Context(), apLoad(t, apBase()), nil, nil); !errors.Is(err, table.ErrInvalidTransaction) {
		t.Errorf("nil transaction: %v", err)
	}
}

// ---- deltas, not post-images (Lance #9216, #9217) ----

// TestApplyDeltasNotPostImages commits a change to a fragment between a
// Delete's (or Update's) read version and the head it is applied at, and
// checks that the post-image does not undo it.
func TestApplyDeltasNotPostImages(t *testing.T) {
	v1pb := apManifest(1, apFrag(0, 10, apFile("a", 0, 1), apFile("b", 2, 3)), apFrag(1, 10))
	v1 := apLoad(t, v1pb)
	mustApply := func(head *table.Manifest, txn *lancepb.Transaction) *table.Manifest {
		t.Helper()
		m, err := table.Apply(t.Context(), head, txn, nil)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	// Post-images built at version 1.
	deleteAtV1 := apDelete(1, nil, apWithDel(v1pb.Fragments[0], apDel(1, 77, 3)))
	rowsAtV1 := apUpdate(1, &lancepb.Transaction_Update{
		UpdatedFragments: []*lancepb.DataFragment{apWithDel(v1pb.Fragments[0], apDel(1, 78, 2))},
		NewFragments:     []*lancepb.DataFragment{apFrag(0, 2)},
	})

	t.Run("Delete keeps a concurrent overlay (#9216)", func(t *testing.T) {
		v2 := mustApply(v1, apOverlayTxn(1, apOvg(0, apOverlay("ov", []int32{1}, []uint32{4}, 0))))
		v3 := mustApply(v2, apAppend(2, apFrag(0, 5)))
		got := mustApply(v3, deleteAtV1).Proto()
		f := apFragByID(got, 0)
		if len(f.GetOverlays()) != 1 || f.GetOverlays()[0].GetCommittedVersion() != 2 {
			t.Errorf("overlay lost: %v", rpText(f))
		}
		if !proto.Equal(f.GetDeletionFile(), apDel(1, 77, 3)) {
			t.Errorf("deletion file not applied")
		}
		apWantIDs(t, got, 0, 1, 2)
		apWantFlags(t, got, table.FlagDeletionFiles|table.FlagDataOverlays, table.FlagDeletionFiles|table.FlagDataOverlays)
	})
	t.Run("Delete does not resurrect a file a concurrent Project pruned (#9217)", func(t *testing.T) {
		v2 := mustApply(v1, apProject(1, apSchema()[:2])) // drops fields 2 and 3: file b goes
		got := mustApply(v2, deleteAtV1).Proto()
		apWantPaths(t, apFragByID(got, 0), "a")
		if len(got.GetFields()) != 2 {
			t.Errorf("schema changed back")
		}
	})
	t.Run("Delete keeps a concurrent column replacement", func(t *testing.T) {
		v2 := mustApply(v1, apReplace(1, apRepl(0, apFile("b2", 2, 3))))
		got := mustApply(v2, deleteAtV1).Proto()
		apWantPaths(t, apFragByID(got, 0), "a", "b2")
	})
	t.Run("REWRITE_ROWS Update keeps a concurrent overlay and pruning", func(t *testing.T) {
		v2 := mustApply(v1, apOverlayTxn(1, apOvg(0, apOverlay("ov", []int32{1}, []uint32{4}, 0))))
		v3 := mustApply(v2, apProject(2, apSchema()[:2]))
		got := mustApply(v3, rowsAtV1).Proto()
		f := apFragByID(got, 0)
		apWantPaths(t, f, "a")
		if len(f.GetOverlays()) != 1 || !proto.Equal(f.GetDeletionFile(), apDel(1, 78, 2)) {
			t.Errorf("fragment %v", rpText(f))
		}
		apWantIDs(t, got, 0, 1, 2)
	})
	t.Run("REWRITE_COLUMNS Update keeps a concurrent deletion and overlay on another field", func(t *testing.T) {
		post := apFrag(0, 10, apFile("a", 0, 1), apFile("b", 2, -2), apFile("c", 3))
		colsAtV1 := apUpdate(1, &lancepb.Transaction_Update{UpdateMode: lancepb.Transaction_REWRITE_COLUMNS,
			UpdatedFragments: []*lancepb.DataFragment{post}, FieldsModified: []uint32{3}})
		v2 := mustApply(v1, apDelete(1, nil, apWithDel(v1pb.Fragments[0], apDel(1, 5, 1))))
		v3 := mustApply(v2, apOverlayTxn(2, apOvg(0, apOverlay("ov", []int32{1}, []uint32{4}, 0), apOverlay("ov3", []int32{3}, []uint32{4}, 0))))
		got := mustApply(v3, colsAtV1).Proto()
		f := apFragByID(got, 0)
		apWantPaths(t, f, "a", "b", "c")
		apWantFields(t, f.GetFiles()[1], 2, -2)
		if !proto.Equal(f.GetDeletionFile(), apDel(1, 5, 1)) {
			t.Errorf("concurrent deletion lost: %v", f.GetDeletionFile())
		}
		// Both overlays were committed (v3) after the update's read version
		// (1): they are newer than its values and stay in force.
		if len(f.GetOverlays()) != 2 {
			t.Errorf("overlays %v", f.GetOverlays())
		}
	})
	t.Run("Updates do not resurrect a file a concurrent DataReplacement renamed", func(t *testing.T) {
		v2 := mustApply(v1, apReplace(1, apRepl(0, apFile("b2", 2, 3))))
		got := mustApply(v2, rowsAtV1).Proto()
		apWantPaths(t, apFragByID(got, 0), "a", "b2")

		post := apFrag(0, 10, apFile("a", 0, 1), apFile("b", 2, -2), apFile("c", 3))
		colsAtV1 := apUpdate(1, &lancepb.Transaction_Update{UpdateMode: lancepb.Transaction_REWRITE_COLUMNS,
			UpdatedFragments: []*lancepb.DataFragment{post}, FieldsModified: []uint32{3}})
		got = mustApply(v2, colsAtV1).Proto()
		f := apFragByID(got, 0)
		apWantPaths(t, f, "a", "b2", "c")
		apWantFields(t, f.GetFiles()[1], 2, -2)
	})
	t.Run("with no concurrent change the post-image is installed as Lance does", func(t *testing.T) {
		got := mustApply(v1, deleteAtV1).Proto()
		if !proto.Equal(apFragByID(got, 0), deleteAtV1.GetDelete().GetUpdatedFragments()[0]) {
			t.Errorf("fragment %v", rpText(apFragByID(got, 0)))
		}
		// An in-place column rewrite, post-image as Lance's update_columns
		// builds it: the old field tombstoned, the new file last.
		for _, c := range []struct {
			post     *lancepb.DataFragment
			modified []uint32
		}{
			{apFrag(0, 10, apFile("a", 0, 1), apFile("b", -2, 3), apFile("c", 2)), []uint32{2}},
			{apFrag(0, 10, apFile("a", 0, 1), apFile("c", 2, 3)), []uint32{2, 3}},
			{apFrag(0, 10, apFile("b", 2, 3), apFile("c", 0, 1)), []uint32{0, 1}},
		} {
			cols := apUpdate(1, &lancepb.Transaction_Update{UpdateMode: lancepb.Transaction_REWRITE_COLUMNS,
				UpdatedFragments: []*lancepb.DataFragment{c.post}, FieldsModified: c.modified})
			got := mustApply(v1, cols).Proto()
			if !proto.Equal(apFragByID(got, 0), c.post) {
				t.Errorf("got %v\nwant %v", rpText(apFragByID(got, 0)), rpText(c.post))
			}
		}
	})
}

// ---- robustness ----

// TestApplyNeverPanics applies every fixture transaction, and mutilated
// versions of it, to every fixture manifest: whatever the combination,
// Apply returns a manifest or a typed error.
func TestApplyNeverPanics(t *testing.T) {
	var heads []*table.Manifest
	var txns []*lancepb.Transaction
	for _, name := range historyNames(t) {
		for _, v := range loadHistory(t, name).Versions {
			m, err := table.FromProto(v.Manifest)
			if err != nil {
				t.Fatal(err)
			}
			heads = append(heads, m)
			txns = append(txns, v.Txn)
		}
	}
	mutations := []func(*lancepb.Transaction){
		func(*lancepb.Transaction) {},
		func(x *lancepb.Transaction) { proto.Reset(x) },
		func(x *lancepb.Transaction) {
			// Scramble every uint64 and int32 id the message holds.
			apScramble(x.ProtoReflect())
		},
	}
	versions := rpVersions{}
	for _, h := range heads {
		versions[h.Version()] = h
	}
	n := 0
	for _, h := range heads {
		for _, txn := range txns {
			for _, mutate := range mutations {
				x := proto.CloneOf(txn)
				mutate(x)
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Fatalf("Apply panicked on v%d with %v: %v", h.Version(), rpText(x), r)
						}
					}()
					_, err := table.Apply(t.Context(), h, x, versions)
					var te *table.Error
					if err != nil && !errors.As(err, &te) {
						t.Errorf("untyped error %v", err)
					}
				}()
				n++
			}
		}
	}
	t.Logf("%d applications", n)
}

func TestApplyNilHeadFragmentIDsAndCounts(t *testing.T) {
	// A head whose fragments have no max_fragment_id recorded: ids continue
	// after the largest id (Lance's max_fragment_id() fallback).
	m := apBase()
	m.MaxFragmentId = nil
	next, err := table.Apply(t.Context(), apLoad(t, m), apAppend(3, apFrag(0, 1)), nil)
	if err != nil {
		t.Fatal(err)
	}
	apWantIDs(t, next.Proto(), 0, 1, 2, 3)
	apWantMaxID(t, next.Proto(), 3)
}

// apScramble changes every integer field of m (ids, counts, versions, field
// ids) to unlikely values, recursively.
func apScramble(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if fd.Message() != nil {
					apScramble(l.Get(i).Message())
				} else if nv, ok := apScrambled(fd, l.Get(i)); ok {
					l.Set(i, nv)
				}
			}
		case fd.Message() != nil:
			apScramble(v.Message())
		default:
			if nv, ok := apScrambled(fd, v); ok {
				m.Set(fd, nv)
			}
		}
		return true
	})
}

func apScrambled(fd protoreflect.FieldDescriptor, v protoreflect.Value) (protoreflect.Value, bool) {
	switch fd.Kind() {
	case protoreflect.Uint64Kind:
		return protoreflect.ValueOfUint64(v.Uint()*2654435761 + 1<<40), true
	case protoreflect.Uint32Kind:
		return protoreflect.ValueOfUint32(uint32(v.Uint())*2654435761 + 3), true
	case protoreflect.Int32Kind:
		return protoreflect.ValueOfInt32(-int32(v.Int()) - 3), true
	case protoreflect.BytesKind:
		b := slices.Clone(v.Bytes())
		for i := range b {
			b[i] ^= 0x5a
		}
		return protoreflect.ValueOfBytes(b), true
	}
	return v, false
}

// ---- cost does not grow with the table ----

// apBig is a manifest of n fragments, every tenth with a deletion file.
func apBig(b *testing.B, n int) *table.Manifest {
	b.Helper()
	frags := make([]*lancepb.DataFragment, n)
	for i := range frags {
		frags[i] = apFrag(uint64(i), 1000)
		if i%10 == 0 {
			frags[i].DeletionFile = apDel(1, uint64(i), 3)
		}
	}
	m, err := table.FromProto(apManifest(7, frags...))
	if err != nil {
		b.Fatal(err)
	}
	return m
}

var apSizes = []int{1_000, 100_000}

// BenchmarkApplyAppend appends one fragment. Per-operation time and
// allocations are about the same at 1k and 100k fragments: the new version
// shares every existing fragment and copies only a few trie nodes.
func BenchmarkApplyAppend(b *testing.B) {
	for _, n := range apSizes {
		b.Run(fmt.Sprintf("fragments=%d", n), func(b *testing.B) {
			head := apBig(b, n)
			txn := apAppend(7, apFrag(0, 500))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := table.Apply(b.Context(), head, txn, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkApplyDelete installs a deletion file in one fragment in the
// middle of the table.
func BenchmarkApplyDelete(b *testing.B) {
	for _, n := range apSizes {
		b.Run(fmt.Sprintf("fragments=%d", n), func(b *testing.B) {
			head := apBig(b, n)
			mid := uint64(n/2 + 1)
			txn := apDelete(7, nil, apWithDel(apFrag(mid, 1000), apDel(7, 99, 10)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := table.Apply(b.Context(), head, txn, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkApplyChain applies a thousand appends and deletes in a row to a
// 100k-fragment table, each to the previous result, as the committer does.
func BenchmarkApplyChain(b *testing.B) {
	head := apBig(b, 100_000)
	b.ReportAllocs()
	for b.Loop() {
		m := head
		for i := range 1000 {
			var txn *lancepb.Transaction
			if i%2 == 0 {
				txn = apAppend(m.Version(), apFrag(0, 10))
			} else {
				txn = apDelete(m.Version(), nil, apWithDel(apFrag(uint64(i*97%100_000), 1000), apDel(m.Version(), uint64(i), 1)))
			}
			next, err := table.Apply(b.Context(), m, txn, nil)
			if err != nil {
				b.Fatal(err)
			}
			m = next
		}
	}
}

// TestApplyFileVersion22: a table created from 2.2 data files (LanceDB
// 0.39's default) has data storage version 2.2, takes 2.2 appends, and
// refuses a 2.1 file, as it refuses a 2.2 file in a 2.1 table.
func TestApplyFileVersion22(t *testing.T) {
	file := func(path string, minor uint32) *lancepb.DataFile {
		df := apFile(path, 0, 1, 2, 3)
		df.FileMinorVersion = minor
		return df
	}
	for _, tc := range []struct {
		table, other uint32
		want         string
	}{{2, 1, "2.2"}, {1, 2, "2.1"}} {
		m, err := table.Create(apOverwrite(0, &lancepb.Transaction_Overwrite{Schema: apSchema(), Fragments: []*lancepb.DataFragment{apFrag(0, 3, file("a", tc.table))}}))
		if err != nil {
			t.Fatal(err)
		}
		if got := m.DataFormat().GetVersion(); got != tc.want {
			t.Errorf("created from 2.%d files: data storage version %q, want %q", tc.table, got, tc.want)
		}
		if _, err := table.Apply(t.Context(), m, apAppend(1, apFrag(0, 2, file("b", tc.table))), nil); err != nil {
			t.Errorf("%s table: append of a 2.%d file: %v", tc.want, tc.table, err)
		}
		_, err = table.Apply(t.Context(), m, apAppend(1, apFrag(0, 2, file("c", tc.other))), nil)
		if !errors.Is(err, table.ErrInvalidTransaction) || !strings.Contains(err.Error(), "data storage version is "+tc.want) {
			t.Errorf("%s table: append of a 2.%d file: %v, want ErrInvalidTransaction naming the versions", tc.want, tc.other, err)
		}
	}
}
