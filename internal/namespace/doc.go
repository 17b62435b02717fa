// Package namespace serves the Lance REST namespace with managed
// versioning, so that unmodified LanceDB and Lance clients commit table
// versions through cellguard, in one order with every other writer.
//
// # How a Lance client uses it
//
// A client connects with `lancedb.connectNamespace("rest", {uri,
// headers})`. DeclareTable and DescribeTable answer the table's location
// (its dataset's location: `<lance-root>/<table>.lance`) with
// `managed_versioning: true`, which makes the client route every commit
// through the server: it writes data files, a `_transactions/` file and a
// staged manifest `_versions/{u64::MAX − v:020}.manifest-{uuid}` into the
// location itself, then calls `POST /v1/table/{t}/version/create` with
// the version it proposes and the staged manifest's path. It learns about
// other writers by listing `_versions/` in storage, not through the
// server.
//
// # What a commit is
//
// Server.createVersion turns the call into a staged transaction on the
// dataset's subject — the client's transaction as an attempt at the
// version it proposes (message id `<uuid>@<version>`, header
// Cg-Proposed-Version) — decided by the committer in order with SDK
// workers, and published by the publisher (package publish) — or by
// the namespace itself as it answers, the same way (publish.WriteVersion
// of the decision replayed on the head). Before
// staging it checks that the proposed version is head + 1 (else 409,
// code 14: the client rebases), and verifies the client's manifest
// against table.Apply of the rebased transaction (table.ManifestDiff,
// stamped fields aside). A mismatch is a refusal: staged with the
// Cg-Refusal header, the committer rejects it MANIFEST_MISMATCH with the
// differing fields named, in the decision log like any decision, never
// published. The proposed version binds: if another writer commits
// between the check and the decision, the committer rejects the attempt
// VERSION_MOVED (409, code 14) under the attempt's identity, not the
// uuid, so the client's rebased retry of the same transaction can
// commit. It answers 200 only once the final manifest is in storage. A
// transaction already decided — a client retrying after a lost answer
// re-sends the same uuid — gets its decision back, never a second
// commit.
//
// LanceDB 8 retries every error from version/create (no status or code
// ends the call), so permanent rejections and refusals are answered from
// the decision log at once on every retry; see docs/design.md §9 for the
// measured client behaviour and its limits.
//
// # Dropping a table
//
// DropTable of a created table deletes its dataset (package drop): the
// dataset's tombstone is appended to the decision log, so the committer
// rejects every later transaction DATASET_DELETED and the publisher
// stops, and then the table's Lance directory is purged — the spec's
// drop deletes the data, and LanceDB's dropTable deletes nothing itself.
// Only the admin NATS role may write a tombstone, so the server drops
// with Config.Admin, a second connection as an admin user (nil: a created
// table is not dropped, 406 code 0); and only an admin token may ask
// (never anyone on a server without Tokens). A table with undecided
// staged work is busy (409 code 19) once Config.DropWait has passed.
// Afterwards the table is not found by reads (404 code 4), is left out of
// table/list, and its name is refused to declare and version/create (409
// code 19, DATASET_DELETED) before anything is staged: the log keeps the
// table's history under that name.
//
// # Reads, errors, auth
//
// version/list and version/describe report what is in storage, up to the
// decision log's head: versions a client's cleanup (optimize) removed are
// gone from both. Errors are the spec's `{error, code, detail, instance}`
// with its HTTP statuses; every handler runs under a deadline and bodies
// are bounded. Tokens (ParseTokens) map bearer tokens or `x-api-key`
// values to a reader, worker or admin role over some tables: 401 (code
// 16) without a known token, 403 (code 15) without the right.
package namespace
