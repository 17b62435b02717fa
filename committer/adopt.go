package committer

import (
	"context"

	"google.golang.org/protobuf/proto"

	"cellguard/internal/declog"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

// adopt commits an adoption (declog.AdoptProperty): the dataset starts at
// the adopted Lance version N, whose manifest the record carries; the next
// commit is N+1. The adoption must name the location it was read from,
// and the dataset serves Lance 8 readers (LanceDB keeps reading it).
func (s *state) adopt(txn *lancepb.Transaction, rec *cellguardpb.Decision) (verdict, *rejection) {
	m, raw, rawIndices, _, err := declog.AdoptionOf(txn)
	if err != nil {
		return verdict{}, reject(cellguardpb.Reason_INVALID_TRANSACTION, "%v", err)
	}
	cfg, rej := creationConfig(txn, s.ds, "")
	if rej != nil {
		return verdict{}, rej
	}
	if cfg.GetLocation() == "" {
		return verdict{}, reject(cellguardpb.Reason_INVALID_TRANSACTION, "an adoption must name the location of the adopted table")
	}
	if v := m.DataFormat().GetVersion(); v != "" {
		cfg.StorageVersion = v
	}
	rec.Outcome = cellguardpb.Outcome_OUTCOME_COMMITTED
	rec.Version = m.Version()
	rec.DatasetConfig = cfg
	rec.AdoptedManifest = raw
	rec.AdoptedIndexSection = rawIndices
	opts := proto.MarshalOptions{Deterministic: true}
	if rec.Transaction, err = opts.Marshal(txn); err != nil {
		return verdict{}, reject(cellguardpb.Reason_INTERNAL, "encode adoption: %v", err)
	}
	return verdict{rec: rec, next: m, txn: txn}, nil
}

// padVersions starts the version index at an adopted first version: the
// versions before it are not in the log.
func (s *state) padVersions(first uint64) {
	if s.versionSeq.top() == 0 && first > 1 {
		s.versionSeq.start(first)
	}
}

// adoption reports whether the committed record r (read headers only)
// is an adoption; a record that cannot be read is not.
func (c *Committer) adoption(ctx context.Context, r declog.Record) bool {
	full, err := c.record(ctx, r.Seq)
	return err == nil && full.Decision.GetAdoptedManifest() != nil
}
