// Package publish makes every committed version of a dataset a real Lance
// version in the dataset's location, so that LanceDB, pylance and any
// Lance reader open the table, list its versions and read any of them.
//
// # What is written
//
// A dataset's location (a gocloud.dev/blob URL: a path, file://, s3://,
// mem://) is its Lance directory, `<table>.lance/`, recorded in the
// decision log when the dataset is created (declog.Log.Config). Workers
// write data files to `data/` and deletion files to `_deletions/` there;
// the publisher adds, for each committed version v with transaction T:
//
//	_transactions/{T.read_version}-{T.uuid}.txn   T as raw protobuf
//	_versions/{u64::MAX − v:020}.manifest         the manifest, T inline (V2 naming)
//	_versions/latest_version_hint.json            {"version": v}, best-effort
//
// ManifestFile builds the manifest file from the table model: schema,
// fragments, next_row_id, data storage version, writer version, feature
// flags, transaction file name and timestamp, with the transaction inline
// as LanceDB 8 writes it.
//
// # The protocol
//
// A Publisher follows one dataset's decision log (declog Scan, Live) and
// replays it (declog.Replay), so the decision log stays the source of
// truth and storage follows. For each version it writes the transaction
// file, then creates the manifest only if it is absent — the commit
// point a reader sees, always last, so a crash leaves nothing a reader
// could take for a version. A manifest already there with the same
// transaction uuid was published before (idempotence); with another uuid
// it is a foreign version (ErrForeignVersion): never overwritten, and the
// dataset's publishing stops loudly (log, cellguard_publish_stopped). A
// store that fails is retried without end; the committer never waits for
// it, and the lag shows as cellguard_publish_lag_versions.
//
// On start the publisher resumes after the newest version in storage,
// once it has checked that version is ours (its transaction uuid is the
// one the log committed at that version).
//
// A Manager runs one Publisher per dataset with a location; `cellguard
// serve` runs one beside the committer.
//
// # Adoption
//
// ReadAdoption checks the latest version of a table LanceDB wrote, and
// Adopt stages it as the dataset's first record (declog.AdoptProperty):
// cellguard continues the table from there. Indices, legacy files, mixed
// data file versions and V1 manifest names are refused (ErrCannotAdopt).
//
// See docs/design.md §8 for why a follower publishes and why overlays are
// rejected on datasets that serve Lance 8.
package publish
