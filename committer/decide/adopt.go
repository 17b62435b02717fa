package decide

import (
	"google.golang.org/protobuf/proto"

	"cellguard/internal/logrec"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

// adopt commits an adoption (logrec.AdoptProperty): the dataset starts at
// the adopted Lance version N, whose manifest the record carries; the next
// commit is N+1. The adoption must name the location it was read from,
// and the dataset serves Lance 8 readers (LanceDB keeps reading it).
func (s *State) adopt(txn *lancepb.Transaction, rec *cellguardpb.Decision) (Verdict, *Rejection) {
	m, raw, rawIndices, _, err := logrec.AdoptionOf(txn)
	if err != nil {
		return Verdict{}, Reject(cellguardpb.Reason_INVALID_TRANSACTION, "%v", err)
	}
	cfg, rej := creationConfig(txn, s.Dataset, "", nil)
	if rej != nil {
		return Verdict{}, rej
	}
	if cfg.GetLocation() == "" {
		return Verdict{}, Reject(cellguardpb.Reason_INVALID_TRANSACTION, "an adoption must name the location of the adopted table")
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
		return Verdict{}, Reject(cellguardpb.Reason_INTERNAL, "encode adoption: %v", err)
	}
	return Verdict{Rec: rec, Next: m, Txn: txn}, nil
}

// padVersions starts the version index at an adopted first version: the
// versions before it are not in the log.
func (s *State) padVersions(first uint64) {
	if s.VersionSeq.Top() == 0 && first > 1 {
		s.VersionSeq.Start(first)
	}
}
