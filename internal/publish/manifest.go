package publish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"cellguard/internal/logrec"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// Directories and files of a Lance dataset, relative to its root.
const (
	versionsDir     = "_versions/"
	transactionsDir = "_transactions/"
	hintFile        = versionsDir + "latest_version_hint.json"
)

// Lance feature flags (manifest reader_feature_flags/writer_feature_flags)
// that a published version may carry. Any other bit in a manifest we are
// asked to publish is an error: we never claim a feature we did not check.
const (
	flagDeletionFiles = 1
	flagStableRowIDs  = 2
	flagV2Format      = 4 // deprecated, still accepted
	flagTableConfig   = 8
	flagOverlays      = 64
	knownFlags        = flagDeletionFiles | flagStableRowIDs | flagV2Format | flagTableConfig | flagOverlays
)

// DefaultStorageVersion is the data storage version of tables cellguard
// creates: LanceDB 0.31's default.
const DefaultStorageVersion = logrec.DefaultStorageVersion

// writerVersion is what published manifests name as their writer. Lance
// consults the writer version only to work around bugs of older Lance
// releases; we write what the Lance release whose layout we follow (8.0,
// inside LanceDB 0.31) writes, so no workaround applies.
var writerVersion = &lancepb.Manifest_WriterVersion{Library: "lance", Version: "8.0.0"}

// ErrUnpublishable reports a committed version that cannot be laid out as
// a Lance version (unknown feature flags, a missing transaction).
var ErrUnpublishable = errors.New("publish: version cannot be published as Lance")

// ManifestFile builds the Lance manifest file of version m, committed by
// txn: the manifest with everything a Lance reader needs (storage
// version, writer version, feature flags, the transaction file's name,
// schema, fragments, next_row_id, timestamp) and the transaction inline,
// as LanceDB 8 writes it, and the version's index section first, where
// Lance puts it (none when the version has no index). storageVersion applies when the manifest has no
// data_format of its own.
func ManifestFile(m *table.Manifest, txn *lancepb.Transaction, storageVersion string, now time.Time) (*table.ManifestFile, error) {
	if txn == nil || txn.GetUuid() == "" {
		return nil, fmt.Errorf("%w: version %d has no transaction", ErrUnpublishable, m.Version())
	}
	pb := m.Proto()
	if pb.GetDataFormat().GetVersion() == "" {
		if storageVersion == "" {
			storageVersion = DefaultStorageVersion
		}
		pb.DataFormat = &lancepb.Manifest_DataStorageFormat{FileFormat: "lance", Version: storageVersion}
	}
	flags, err := featureFlags(pb)
	if err != nil {
		return nil, err
	}
	pb.ReaderFeatureFlags, pb.WriterFeatureFlags = flags, flags
	pb.WriterVersion = writerVersion
	pb.Timestamp = timestamppb.New(now)
	pb.TransactionFile = TransactionFile(txn)
	return &table.ManifestFile{Manifest: pb, Transaction: txn, Indexes: m.IndexSection()}, nil
}

// TransactionFile is the name, under `_transactions/`, of the transaction
// file a published version of txn names: Lance's `{read_version}-{uuid}.txn`
// with a uuid of its own, derived from the transaction's, so that every
// writer of the version names the same file and none names the file a
// Lance client wrote before its call, which the client deletes when it
// believes that call failed.
func TransactionFile(txn *lancepb.Transaction) string {
	return table.TransactionFileName(txn.GetReadVersion(), uuid.NewSHA1(txnFileSpace, []byte(txn.GetUuid())).String())
}

// txnFileSpace is the name space of TransactionFile's uuids.
var txnFileSpace = uuid.MustParse("9b1f4c1e-6a53-4d8e-9f0c-2f6f3b0c7a41")

// featureFlags returns the flags pb needs: the ones it already carries
// (stable row ids, table config) and the ones its fragments call for.
func featureFlags(pb *lancepb.Manifest) (uint64, error) {
	flags := pb.GetReaderFeatureFlags() | pb.GetWriterFeatureFlags()
	if unknown := flags &^ knownFlags; unknown != 0 {
		return 0, fmt.Errorf("%w: version %d carries feature flags %#x this publisher does not know", ErrUnpublishable, pb.GetVersion(), unknown)
	}
	flags &^= flagDeletionFiles | flagOverlays
	for _, f := range pb.GetFragments() {
		if f.GetDeletionFile() != nil {
			flags |= flagDeletionFiles
		}
		if len(f.GetOverlays()) > 0 {
			flags |= flagOverlays
		}
	}
	if len(pb.GetConfig()) > 0 {
		flags |= flagTableConfig
	}
	return flags, nil
}

// txnID returns the uuid of a manifest file's transaction: the inline
// section's, or the one its transaction_file names.
// TxnID is the uuid of the transaction that committed the version in
// manifest file f: inline, else named by its transaction file.
func TxnID(f *table.ManifestFile) string { return txnID(f) }

func txnID(f *table.ManifestFile) string {
	if id := f.Transaction.GetUuid(); id != "" {
		return id
	}
	name := strings.TrimSuffix(f.Manifest.GetTransactionFile(), ".txn")
	if _, id, ok := strings.Cut(name, "-"); ok {
		return id
	}
	return ""
}

// Versions lists the main-line versions present in the location's
// `_versions/`, in either naming scheme, ascending. Staging and detached
// manifests and other files are ignored, as Lance ignores them.
//
// A local directory is read by name only, so files that other writers
// create and rename away meanwhile (temporary files of Lance's or ours)
// do not disturb it. Elsewhere a listing that fails with NotFound is taken
// again, a bounded number of times.
func Versions(ctx context.Context, loc *Location) ([]uint64, error) {
	if names, ok, err := loc.LocalNames(versionsDir); ok {
		if err != nil {
			return nil, fmt.Errorf("%w: list %s in %s: %v", ErrLocation, versionsDir, loc.URL, err)
		}
		var vs []uint64
		for _, n := range names {
			if v, ok := table.ParseManifestFileName(versionsDir + n); ok {
				vs = append(vs, v)
			}
		}
		slices.Sort(vs)
		return vs, nil
	}
	const attempts = 8
	var err error
	for range attempts {
		var vs []uint64
		vs, err = listVersions(ctx, loc)
		if err == nil {
			return vs, nil
		}
		if gcerrors.Code(err) != gcerrors.NotFound || ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("%w: list %s in %s: %v", ErrLocation, versionsDir, loc.URL, err)
}

func listVersions(ctx context.Context, loc *Location) ([]uint64, error) {
	it := loc.Bucket.List(&blob.ListOptions{Prefix: versionsDir})
	var vs []uint64
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if v, ok := table.ParseManifestFileName(obj.Key); ok {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs, nil
}

// LatestVersion returns the newest version present in the location, 0 if
// there is none.
func LatestVersion(ctx context.Context, loc *Location) (uint64, error) {
	vs, err := Versions(ctx, loc)
	if err != nil || len(vs) == 0 {
		return 0, err
	}
	return vs[len(vs)-1], nil
}

// ReadVersion reads the manifest file of version v, in whichever naming
// scheme the location uses.
func ReadVersion(ctx context.Context, loc *Location, v uint64) (*table.ManifestFile, error) {
	var lastErr error
	for _, v2 := range []bool{true, false} {
		b, err := loc.ReadRegular(ctx, versionsDir+table.ManifestFileName(v, v2), MaxFileBytes)
		if errors.Is(err, ErrNotRegular) || errors.Is(err, ErrTooLarge) {
			return nil, fmt.Errorf("publish: read version %d in %s: %w", v, loc.URL, err)
		}
		if err != nil {
			lastErr = err
			continue
		}
		return table.ReadManifestFile(b)
	}
	return nil, fmt.Errorf("publish: read version %d in %s: %w", v, loc.URL, lastErr)
}

// writeHint writes `_versions/latest_version_hint.json` as Lance does.
// It is best-effort for readers, who verify it, so the caller only logs a
// failure.
func writeHint(ctx context.Context, loc *Location, v uint64) error {
	b, _ := json.Marshal(struct {
		Version uint64 `json:"version"`
	}{v})
	return loc.Bucket.WriteAll(ctx, hintFile, b, nil)
}

// encode marshals a manifest file; kept apart for the benchmark.
func encode(f *table.ManifestFile) ([]byte, error) { return table.WriteManifestFile(f) }

// txnBytes is the `_transactions/*.txn` content: the raw protobuf.
func txnBytes(txn *lancepb.Transaction) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(txn)
}
