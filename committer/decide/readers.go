package decide

// readers.go holds what a dataset's configuration (declog.Config: its
// published location and the readers it serves) changes in deciding.

import (
	"cellguard/internal/logrec"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// servesLance8 reports whether the dataset's published versions must be
// readable by Lance 8 (LanceDB 0.31): a published dataset whose readers
// are unspecified or lance8.
func servesLance8(cfg *cellguardpb.DatasetConfig) bool {
	if cfg.GetLocation() == "" {
		return false
	}
	r := cfg.GetReaders()
	return r == cellguardpb.Readers_READERS_UNSPECIFIED || r == cellguardpb.Readers_READERS_LANCE8
}

// checkReaders rejects the operations whose result the dataset's readers
// cannot read correctly. It runs before any other rule: the answer does
// not depend on the table's state, and no retry can change it.
//
//   - DataOverlay on a dataset serving Lance 8: LanceDB 0.31 has no
//     overlay code, so a published version with overlays is unreadable
//     (reader flag 64) or, without the flag, read with stale base values.
//     LanceDB 0.39 (Lance 12.0) refuses flag 64 as well (measured:
//     publish.TestLanceDBReadsOverlays), so no LanceDB readers get one.
//
// CreateIndex is never refused here: every version carries its index
// section, kept as Lance keeps it (table.Apply), and published with it.
func checkReaders(cfg *cellguardpb.DatasetConfig, op table.Op) *Rejection {
	switch {
	case op == table.OpDataOverlay && servesLance8(cfg):
		return Reject(cellguardpb.Reason_UNSUPPORTED_BY_READERS,
			"dataset is published for Lance 8 readers (readers=lance8), which cannot read data overlays; "+
				"write the column with a DataReplacement or an Update (REWRITE_COLUMNS) instead")
	}
	return nil
}

// creationConfig returns the configuration a creating transaction
// carries, for its committed record, completed with the defaults: the
// location <lanceRoot>/<ds>.lance when the transaction names none and
// lanceRoot is set, Lance 8 readers and storage version
// logrec.DefaultStorageVersion for a published dataset (create records
// the version the table then has). A property that does not decode rejects the
// creation.
func creationConfig(txn *lancepb.Transaction, ds, lanceRoot string, locate func(root, ds string) (string, error)) (*cellguardpb.DatasetConfig, *Rejection) {
	cfg, err := logrec.ConfigOf(txn)
	if err != nil {
		return nil, Reject(cellguardpb.Reason_INVALID_TRANSACTION, "%v", err)
	}
	if cfg == nil && lanceRoot == "" {
		return nil, nil // not published: today's behaviour
	}
	if cfg == nil {
		cfg = &cellguardpb.DatasetConfig{}
	}
	if cfg.Location == "" && lanceRoot != "" {
		if locate == nil {
			return nil, Reject(cellguardpb.Reason_INTERNAL, "no way to join the lance root %q and dataset %q", lanceRoot, ds)
		}
		if cfg.Location, err = locate(lanceRoot, ds); err != nil {
			return nil, Reject(cellguardpb.Reason_INTERNAL, "%v", err)
		}
	}
	if cfg.Location != "" {
		if cfg.Readers == cellguardpb.Readers_READERS_UNSPECIFIED {
			cfg.Readers = cellguardpb.Readers_READERS_LANCE8
		}
		if cfg.StorageVersion == "" {
			cfg.StorageVersion = logrec.DefaultStorageVersion
		}
	}
	return cfg, nil
}
