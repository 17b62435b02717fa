package publish

import (
	"context"
	"errors"
	"fmt"
	"github.com/RoaringBitmap/roaring/v2"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"cellguard/internal/declog"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// Adoption errors. Each refusal wraps ErrCannotAdopt and says why.
var (
	// ErrNotLance reports a location that holds no Lance table: no
	// `_versions/*.manifest`.
	ErrNotLance = errors.New("publish: not a Lance table")
	// ErrCannotAdopt reports a Lance table that cellguard cannot carry on
	// exactly: indices (whose fragment coverage cellguard does not
	// maintain), the legacy (0.1) file format, mixed data file versions,
	// external base paths, V1 manifest names, unknown feature flags, or a
	// latest version without a transaction.
	ErrCannotAdopt = errors.New("publish: table cannot be adopted")
)

// Adoption is the latest version of a Lance table, checked for adoption.
type Adoption struct {
	Manifest *lancepb.Manifest
	Indices  *lancepb.IndexSection // the version's index section; nil if it has none
	Txn      *lancepb.Transaction  // the transaction Lance committed at Manifest.version
}

// ReadAdoption reads the latest version of the Lance table at loc and
// checks that cellguard can continue it: every refusal is a typed error
// (ErrNotLance, ErrCannotAdopt, table.ErrMalformed for a manifest that
// does not decode, ErrLocation).
func ReadAdoption(ctx context.Context, loc *Location) (*Adoption, error) {
	latest, err := LatestVersion(ctx, loc)
	if err != nil {
		return nil, err
	}
	if latest == 0 {
		return nil, fmt.Errorf("%w: %s has no _versions/*.manifest", ErrNotLance, loc.URL)
	}
	key := versionsDir + table.ManifestFileName(latest, true)
	b, err := loc.ReadRegular(ctx, key, MaxFileBytes)
	if err != nil {
		if ok, _ := loc.Bucket.Exists(ctx, versionsDir+table.ManifestFileName(latest, false)); ok {
			return nil, fmt.Errorf("%w: %s uses V1 manifest names; cellguard publishes V2 names (LanceDB's default), and mixing them would confuse readers", ErrCannotAdopt, loc.URL)
		}
		return nil, fmt.Errorf("%w: read %s: %v", ErrLocation, key, err)
	}
	f, err := table.ReadManifestFile(b)
	if err != nil {
		return nil, fmt.Errorf("publish: adopt %s version %d: %w", loc.URL, latest, err)
	}
	if f.Manifest.GetVersion() != latest {
		return nil, fmt.Errorf("publish: adopt %s: %s holds version %d: %w", loc.URL, key, f.Manifest.GetVersion(), table.ErrMalformed)
	}
	if err := adoptable(f); err != nil {
		return nil, fmt.Errorf("publish: adopt %s version %d: %w", loc.URL, latest, err)
	}
	txn := f.Transaction
	if txn == nil && f.Manifest.GetTransactionFile() != "" {
		tb, err := loc.ReadRegular(ctx, transactionsDir+f.Manifest.GetTransactionFile(), MaxFileBytes)
		if err != nil {
			return nil, fmt.Errorf("%w: version %d: read its transaction file: %v", ErrCannotAdopt, latest, err)
		}
		txn = &lancepb.Transaction{}
		if err := proto.Unmarshal(tb, txn); err != nil {
			return nil, fmt.Errorf("publish: adopt: transaction of version %d: %w: %v", latest, table.ErrMalformed, err)
		}
	}
	if txn.GetUuid() == "" {
		return nil, fmt.Errorf("%w: version %d has no transaction (neither inline nor in _transactions/)", ErrCannotAdopt, latest)
	}
	if _, err := table.FromFile(f); err != nil {
		return nil, fmt.Errorf("publish: adopt %s version %d: %w", loc.URL, latest, err)
	}
	m := proto.CloneOf(f.Manifest)
	m.IndexSection, m.TransactionSection = nil, nil
	var indices *lancepb.IndexSection
	if len(f.Indexes.GetIndices()) > 0 {
		indices = f.Indexes
	}
	return &Adoption{Manifest: m, Indices: indices, Txn: txn}, nil
}

// adoptable refuses what cellguard cannot carry on exactly.
func adoptable(f *table.ManifestFile) error {
	m := f.Manifest
	if err := adoptableIndices(f.Indexes); err != nil {
		return err
	}
	flags := m.GetReaderFeatureFlags() | m.GetWriterFeatureFlags()
	if unknown := flags &^ knownFlags; unknown != 0 {
		return fmt.Errorf("%w: feature flags %#x are not supported", ErrCannotAdopt, unknown)
	}
	if len(m.GetBasePaths()) > 0 {
		return fmt.Errorf("%w: files under external base paths are not supported", ErrCannotAdopt)
	}
	format := m.GetDataFormat().GetVersion()
	if format == "0.1" || format == "legacy" {
		return fmt.Errorf("%w: legacy (0.1) data storage format", ErrCannotAdopt)
	}
	versions := map[string]bool{}
	for _, frag := range m.GetFragments() {
		for _, df := range frag.GetFiles() {
			if df.GetFileMajorVersion() == 0 {
				return fmt.Errorf("%w: fragment %d holds legacy (0.x) data file %s", ErrCannotAdopt, frag.GetId(), df.GetPath())
			}
			if df.BaseId != nil {
				return fmt.Errorf("%w: fragment %d: data file under a base path", ErrCannotAdopt, frag.GetId())
			}
			versions[fmt.Sprintf("%d.%d", df.GetFileMajorVersion(), df.GetFileMinorVersion())] = true
		}
	}
	if len(versions) > 1 {
		return fmt.Errorf("%w: mixed data file versions %v (Lance refuses to append to such a table)", ErrCannotAdopt, keys(versions))
	}
	for v := range versions {
		if format != "" && v != format {
			return fmt.Errorf("%w: data files are %s but the manifest says storage version %s", ErrCannotAdopt, v, format)
		}
	}
	return nil
}

// adoptableIndices refuses, by name, the index segments cellguard cannot
// carry on as Lance would: one without a fragment bitmap (Lance opens the
// index to learn its coverage), one whose files live under another base,
// two segments of one name covering the same fragment (Lance repairs
// those by reopening the index), and the system indices whose state
// cellguard does not model (fragment reuse, MemWAL).
func adoptableIndices(s *lancepb.IndexSection) error {
	covered := map[string]*roaring.Bitmap{}
	for _, ix := range s.GetIndices() {
		name := ix.GetName()
		switch {
		case name == "__lance_frag_reuse":
			return fmt.Errorf("%w: index %q (compaction with deferred index remapping) is not supported; run optimize() with index remapping first", ErrCannotAdopt, name)
		case name == "__lance_mem_wal":
			return fmt.Errorf("%w: index %q (MemWAL) is not supported", ErrCannotAdopt, name)
		case len(ix.GetFragmentBitmap()) == 0:
			return fmt.Errorf("%w: index %q has no fragment bitmap (written by an old Lance); rebuild it with createIndex(replace) first", ErrCannotAdopt, name)
		case ix.BaseId != nil:
			return fmt.Errorf("%w: index %q has files under an external base path", ErrCannotAdopt, name)
		}
		bm, err := table.DecodeBitmap(ix.GetFragmentBitmap())
		if err != nil {
			return fmt.Errorf("publish: adopt: index %q: %w", name, err)
		}
		if prev := covered[name]; prev != nil && prev.Intersects(bm) {
			return fmt.Errorf("%w: segments of index %q cover the same fragments %v", ErrCannotAdopt, name, roaring.And(prev, bm).ToArray())
		} else if prev != nil {
			prev.Or(bm)
		} else {
			covered[name] = bm
		}
	}
	return nil
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Stager is what Adopt needs of a producer (*producer.Client): the
// subject prefix, the JetStream it stages through, and a transaction's
// outcome.
type Stager interface {
	Prefix() string
	JetStream() jetstream.JetStream
	Outcome(ctx context.Context, ds, txnID string, readVersion uint64) (uint64, error)
}

// Adopt starts dataset ds from the latest version of the Lance table at
// location: it checks the table (ReadAdoption), stages the adoption
// (declog.AdoptProperty) under the uuid of the transaction Lance committed
// at that version, and waits for the committer's decision. It returns the
// adopted version; the next commit through cellguard is that version + 1.
// Staging again after a lost answer is safe: the uuid is decided once.
func Adopt(ctx context.Context, pc Stager, ds, location string) (uint64, error) {
	if err := subject.Validate(ds); err != nil {
		return 0, err
	}
	loc, err := OpenLocation(ctx, location, false)
	if err != nil {
		return 0, err
	}
	defer loc.Close()
	a, err := ReadAdoption(ctx, loc)
	if err != nil {
		return 0, err
	}
	if err := CheckWritable(ctx, loc); err != nil {
		return 0, err
	}
	txn := &lancepb.Transaction{
		Uuid: a.Txn.GetUuid(),
		Operation: &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{
			Schema: a.Manifest.GetFields(), // the fragments travel in the adopted manifest
		}},
	}
	cfg := &cellguardpb.DatasetConfig{Location: location, Readers: cellguardpb.Readers_READERS_LANCE8,
		StorageVersion: a.Manifest.GetDataFormat().GetVersion()}
	if err := declog.SetConfig(txn, cfg); err != nil {
		return 0, err
	}
	if err := declog.SetAdoption(txn, a.Manifest, a.Indices); err != nil {
		return 0, err
	}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(txn)
	if err != nil {
		return 0, err
	}
	sc, err := subject.NewScheme(pc.Prefix())
	if err != nil {
		return 0, err
	}
	if _, err := pc.JetStream().Publish(ctx, sc.Txn(ds), body,
		jetstream.WithMsgID(txn.GetUuid()), jetstream.WithExpectStream(sc.TxnStream())); err != nil {
		return 0, fmt.Errorf("publish: stage adoption of %s: %w", location, err)
	}
	return pc.Outcome(ctx, ds, txn.GetUuid(), 0)
}
