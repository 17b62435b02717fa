package namespace

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"cellguard/internal/declog"
	"cellguard/internal/publish"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/rejection"
	"cellguard/table"
)

// createVersionRequest is the spec's CreateTableVersionRequest.
type createVersionRequest struct {
	ID           []string `json:"id"`
	Version      *uint64  `json:"version"`
	ManifestPath string   `json:"manifest_path"`
	ManifestSize *int64   `json:"manifest_size"`
	ETag         string   `json:"e_tag"`
	NamingScheme string   `json:"naming_scheme"`
	Branch       *string  `json:"branch"`
}

// ReasonManifestMismatch is the reason of a refused commit whose
// manifest is not table.Apply's (see table.ManifestDiff): the name of
// cellguardpb.Reason_MANIFEST_MISMATCH, as the refusals metric labels it.
const ReasonManifestMismatch = "MANIFEST_MISMATCH"

// maxRefusalMessage bounds the refusal message staged with a refused
// transaction (the committer bounds it too).
const maxRefusalMessage = 4096

// errBadReadVersion reports a transaction whose read version is not a
// version of the table.
var errBadReadVersion = errors.New("read version not in the table")

// staged is the client's proposal read from storage.
type staged struct {
	manifest *lancepb.Manifest
	txn      *lancepb.Transaction
	body     []byte // txn as staged on the dataset's subject
}

// createVersion commits a version a Lance client staged: see the package
// documentation for the protocol.
func (s *Server) createVersion(ctx context.Context, r *http.Request) (any, *Error) {
	var req createVersionRequest
	if e := decode(r, &req); e != nil {
		return nil, e
	}
	ds, e := tableName(r, req.ID)
	if e != nil {
		return nil, e
	}
	if e := s.cfg.Tokens.authorize(r, RoleWorker, ds); e != nil {
		return nil, e
	}
	if e := req.validate(); e != nil {
		return nil, e
	}
	v := *req.Version
	clk := s.metrics.clock()
	t, open := s.openTable(ds)
	if !open {
		// Whether the table exists says where its location is; once
		// open, the checks under the lock are enough.
		_, exists, e := s.headToWrite(ctx, ds)
		if e != nil {
			return nil, e
		}
		if t, e = s.location(ctx, ds, exists); e != nil {
			return nil, e
		}
	}
	key, e := stagedKey(t.locURL, req.ManifestPath, v)
	if e != nil {
		return nil, e
	}
	if e := t.lock(ctx); e != nil {
		return nil, e
	}
	defer t.unlock()
	// Dropped while this call waited for the lock? lookup says: it
	// finds the tombstone, or checks for one.
	clk.done("check")
	st, e := s.readStaged(ctx, t, key, req.ManifestSize)
	if e != nil {
		if de := s.checkDropped(ctx, ds, true); de != nil {
			return nil, de // a dropped table's files are gone
		}
		return nil, e
	}
	clk.done("read")
	lk, e := s.lookup(ctx, t, ds, st.txn)
	if e != nil {
		return nil, e
	}
	if lk.decided {
		return s.answer(ctx, t, ds, v, lk.decision, clk)
	}
	from, h, exists := lk.end, lk.head, lk.exists
	var hv uint64
	if exists {
		hv = h.Version
	}
	switch {
	case v <= hv:
		// Taken: let the client see the newer versions in storage
		// before it rebases, or it would propose the same version again.
		if _, err := s.published(ctx, t.loc, hv, publishWait); err != nil {
			return nil, internal(err)
		}
		return nil, errorf(http.StatusConflict, CodeConcurrentModification, "version %d of table %q exists (head %d)", v, ds, hv)
	case v > hv+1:
		return nil, invalid("version %d is ahead of table %q: the next version is %d", v, ds, hv+1)
	}
	clk.done("lookup")
	ref, e := s.verify(ctx, t, ds, h, exists, st)
	if e != nil {
		return nil, e
	}
	clk.done("verify")
	if ref != nil {
		s.metrics.refusals.WithLabelValues(ds, ref.reason.String()).Inc()
	}
	if f := s.beforeStage.Load(); f != nil {
		(*f)(ctx, ds)
	}
	a := attempt{version: v, from: from, refusal: ref}
	if !exists {
		a.storageVersion = st.manifest.GetDataFormat().GetVersion()
	}
	rec, e := s.stageAndAwait(ctx, t, ds, st, a, clk)
	if e != nil {
		return nil, e
	}
	clk.done("decision")
	t.committed(rec)
	return s.answer(ctx, t, ds, v, rec, clk)
}

func (req *createVersionRequest) validate() *Error {
	switch {
	case req.Version == nil || *req.Version == 0:
		return invalid("version must be at least 1")
	case req.ManifestPath == "":
		return invalid("manifest_path is required")
	case req.Branch != nil && *req.Branch != "" && *req.Branch != "main":
		return &Error{Status: http.StatusNotAcceptable, Code: CodeUnsupported, Final: true, Msg: "branches are not supported"}
	case req.NamingScheme != "" && req.NamingScheme != "V2":
		return &Error{Status: http.StatusNotAcceptable, Code: CodeUnsupported, Final: true,
			Msg: fmt.Sprintf("naming_scheme %q is not supported: cellguard publishes V2 manifest names", req.NamingScheme)}
	}
	return nil
}

// stagedKey checks that the client's manifest_path is a staging manifest
// of version v inside the table's `_versions/`, and returns its key in
// the location.
func stagedKey(locURL, manifestPath string, v uint64) (string, *Error) {
	dir := objectPath(locURL, "_versions/")
	name, ok := strings.CutPrefix(strings.TrimPrefix(manifestPath, "/"), dir)
	if !ok || strings.Contains(name, "/") {
		return "", invalid("manifest_path %q is not in the table's _versions/ (%s)", manifestPath, dir)
	}
	id, ok := strings.CutPrefix(name, table.ManifestFileName(v, true)+"-")
	if !ok || id == "" {
		return "", invalid("manifest_path %q is not a staged manifest of version %d (%s-<uuid>)", manifestPath, v, table.ManifestFileName(v, true))
	}
	return "_versions/" + name, nil
}

// readStaged reads the client's staged manifest and its transaction: the
// inline section, or the `_transactions/` file it names.
func (s *Server) readStaged(ctx context.Context, t *tableState, key string, size *int64) (*staged, *Error) {
	b, e := s.readBounded(ctx, t, key)
	if e != nil {
		return nil, e
	}
	if size != nil && *size != int64(len(b)) {
		return nil, invalid("manifest_size %d, but %s has %d bytes", *size, key, len(b))
	}
	mf, err := table.ReadManifestFile(b)
	if err != nil {
		return nil, invalid("staged manifest %s: %v", key, err)
	}
	st := &staged{manifest: mf.Manifest, txn: mf.Transaction}
	if st.txn != nil {
		body, err := proto.MarshalOptions{Deterministic: true}.Marshal(st.txn)
		if err != nil {
			return nil, internal(err)
		}
		st.body = body
	} else {
		name := mf.Manifest.GetTransactionFile()
		if name == "" || strings.Contains(name, "/") {
			return nil, invalid("staged manifest %s has no transaction (inline or file)", key)
		}
		if st.body, e = s.readBounded(ctx, t, "_transactions/"+name); e != nil {
			return nil, e
		}
		st.txn = &lancepb.Transaction{}
		if err := proto.Unmarshal(st.body, st.txn); err != nil {
			return nil, invalid("transaction file %s: %v", name, err)
		}
	}
	if st.txn.GetUuid() == "" {
		return nil, invalid("staged transaction has no uuid")
	}
	return st, nil
}

// readBounded reads a file the client staged in the table's location:
// only a regular file (a FIFO or device there is refused, never opened
// for a blocking read), at most MaxManifestBytes, within ctx.
func (s *Server) readBounded(ctx context.Context, t *tableState, key string) ([]byte, *Error) {
	b, err := t.loc.ReadRegular(ctx, key, s.cfg.MaxManifestBytes)
	switch {
	case err == nil:
		return b, nil
	case errors.Is(err, publish.ErrTooLarge):
		return nil, errorf(http.StatusRequestEntityTooLarge, CodeInvalidInput, "%v", err)
	case ctx.Err() != nil:
		return nil, errorf(http.StatusServiceUnavailable, CodeServiceUnavailable, "read %s: not done before the request's deadline", key)
	}
	return nil, invalid("read %s: %v", key, err) // not a regular file (publish.ErrNotRegular), missing, unreadable
}

// lookedUp is what lookup found in the decision log.
type lookedUp struct {
	end      uint64        // the sequence after the log's last record when looked
	decision declog.Record // the transaction's decision, if decided
	decided  bool
	head     declog.Record // the committed head (headers only when from the scan)
	exists   bool          // the table has a committed version
}

// lookup reads what a version/create needs of the log, under the
// table's commit lock: the log's end, read before the transaction is
// looked up (a decision lookup misses is after it, where stageAndAwait
// looks); the transaction's decision, if it has one — a transaction
// already decided gets its decision back: a client retrying after a lost
// answer re-sends the same uuid (at the next version, having taken its
// own commit for a concurrent one), and a refused or rejected one
// re-sends it after any error —; and the committed head. A dropped
// table is refused (409, code 19). When the table's recent manifests
// hold the transaction's read version, one headers-only scan from that
// version's record answers all of it (a tombstone is after the last
// commit); otherwise each is read on its own.
func (s *Server) lookup(ctx context.Context, t *tableState, ds string, txn *lancepb.Transaction) (lookedUp, *Error) {
	var lk lookedUp
	t.mu.Lock()
	gone := t.dropped
	t.mu.Unlock()
	rv := txn.GetReadVersion()
	if lm, ok := t.recent.at(rv); ok && rv > 0 && !gone {
		lk.end, lk.exists = lm.seq+1, true
		lk.head = declog.Record{Seq: lm.seq, Dataset: ds, Outcome: cellguardpb.Outcome_OUTCOME_COMMITTED, Version: rv}
		for r, err := range s.cfg.Log.Scan(ctx, s.sc.DecOf(ds), lm.seq, declog.ScanOptions{HeadersOnly: true}) {
			if err != nil {
				return lk, internal(err)
			}
			lk.end = r.Seq + 1
			switch {
			case r.TxnID == txn.GetUuid():
				full, err := s.cfg.Log.At(ctx, r.Seq)
				if err != nil {
					return lk, internal(err)
				}
				lk.decision, lk.decided = full, true
				return lk, nil
			case r.Outcome == cellguardpb.Outcome_OUTCOME_DELETED:
				return lk, s.checkDropped(ctx, ds, true)
			case r.Committed() && r.Version > lk.head.Version:
				lk.head = r
			}
		}
		return lk, nil
	}
	if e := s.checkDropped(ctx, ds, true); e != nil {
		return lk, e
	}
	var e *Error
	if lk.end, e = s.logEnd(ctx, ds); e != nil {
		return lk, e
	}
	rec, found, err := s.findDecision(ctx, t, ds, txn)
	if err != nil {
		return lk, internal(err)
	}
	if found {
		lk.decision, lk.decided = rec, true
		return lk, nil
	}
	lk.head, lk.exists, e = s.lastCommitted(ctx, ds) // not dropped: checked under the lock
	return lk, e
}

// findDecision looks the transaction's uuid up in the decision log,
// from the record of its read version on.
func (s *Server) findDecision(ctx context.Context, t *tableState, ds string, txn *lancepb.Transaction) (declog.Record, bool, error) {
	from := uint64(1)
	if rv := txn.GetReadVersion(); rv > 0 {
		if lm, ok := t.recent.at(rv); ok {
			from = lm.seq
		} else if seq, err := s.cfg.Log.VersionSeq(ctx, ds, rv); err == nil {
			from = seq
		}
	}
	return s.cfg.Log.Find(ctx, ds, txn.GetUuid(), from)
}

// logEnd returns the sequence after the last record of ds's log.
func (s *Server) logEnd(ctx context.Context, ds string) (uint64, *Error) {
	last, ok, err := s.cfg.Log.Last(ctx, s.sc.DecOf(ds))
	switch {
	case err != nil:
		return 0, internal(err)
	case !ok:
		return 1, nil
	}
	return last.Seq + 1, nil
}

// refusal is the namespace's own verdict against a client's transaction
// (a manifest that is not the table model's, or a transaction that cannot
// apply). It is staged with the transaction (subject.HdrRefusal), so the
// committer decides it in order and it is in the decision log.
type refusal struct {
	reason cellguardpb.Reason
	msg    string
}

// attempt is how one version/create stages its transaction.
type attempt struct {
	version uint64   // the version the client proposes: binding
	from    uint64   // where the decision is looked for in the log
	refusal *refusal // nil: the namespace found nothing wrong
	// storageVersion is the client's table's data storage version, for a
	// creation (subject.HdrStorageVersion): what an empty table has.
	storageVersion string
}

// attemptID is the staged message's identity: its Nats-Msg-Id. It is
// not the transaction's uuid, so a rejection of this attempt
// (VERSION_MOVED) leaves the uuid undecided and the client's retry at the
// next version can commit; the same attempt staged twice is one message.
func attemptID(uuid string, v uint64) string {
	return uuid + "@" + strconv.FormatUint(v, 10)
}

// stageAndAwait stages the transaction on the dataset's subject and waits
// for the committer's decision, which it orders with every other
// writer's. The message proposes the client's version: the committer
// commits it as that version or rejects it VERSION_MOVED (a writer
// committed since the namespace's check). The decision awaited is the
// one of this staged message, or the uuid's (another attempt of the same
// transaction decided it first: this one is then acked undecided).
func (s *Server) stageAndAwait(ctx context.Context, t *tableState, ds string, st *staged, a attempt, clk *stageClock) (declog.Record, *Error) {
	id := st.txn.GetUuid()
	msg := nats.NewMsg(s.sc.Txn(ds))
	msg.Data = st.body
	msg.Header.Set(subject.HdrProposedVersion, strconv.FormatUint(a.version, 10))
	if a.storageVersion != "" {
		msg.Header.Set(subject.HdrStorageVersion, headerValue(a.storageVersion, 32))
	}
	if a.refusal != nil {
		msg.Header.Set(subject.HdrRefusal, a.refusal.reason.String())
		msg.Header.Set(subject.HdrRefusalMessage, headerValue(a.refusal.msg, maxRefusalMessage))
	}
	ack, err := s.cfg.JetStream.PublishMsg(ctx, msg,
		jetstream.WithMsgID(attemptID(id, a.version)), jetstream.WithExpectStream(s.sc.TxnStream()))
	if err != nil {
		return declog.Record{}, errorf(http.StatusServiceUnavailable, CodeServiceUnavailable, "stage transaction %s: %v", id, err)
	}
	clk.done("stage")
	// The decision comes from the table's feed (one live read of its log
	// while it commits, never a consumer per commit: those outlived
	// their requests, and a busy namespace ran into the server's limit
	// of consumers per stream). Now and then the waiter also reads the
	// log itself from where its last look ended, each look a bounded
	// scan of direct gets that may end early (a replica behind: the
	// next look goes on), so a feed that lags costs time, not the
	// decision.
	from := a.from
	t.feed.join(s, ds, a.from)
	defer t.feed.leave()
	timer := time.NewTimer(feedFirst)
	defer timer.Stop()
	for wait := feedFirst; ; {
		r, ok, changed := t.feed.find(a.from, ack.Sequence, id)
		if ok {
			return r, nil
		}
		select {
		case <-changed:
			continue
		case <-ctx.Done():
			return declog.Record{}, errorf(http.StatusServiceUnavailable, CodeServiceUnavailable, "transaction %s staged, decision not seen yet: retry to get it", id)
		case <-timer.C:
		}
		wait = min(2*wait, feedMax)
		timer.Reset(wait)
		// Whether the committer has settled the staged message is read
		// before the log: it appends a decision before it acks.
		settled := s.stagedSettled(ctx, ack.Sequence)
		for r, err := range s.cfg.Log.Scan(ctx, s.sc.DecOf(ds), from, declog.ScanOptions{HeadersOnly: true, Partial: true}) {
			if err != nil {
				return declog.Record{}, errorf(http.StatusServiceUnavailable, CodeServiceUnavailable, "transaction %s staged, decision not seen yet (%v): retry to get it", id, err)
			}
			if r.TxnSeq == ack.Sequence || r.TxnID == id {
				full, err := s.cfg.Log.At(ctx, r.Seq)
				if err != nil {
					return declog.Record{}, internal(err)
				}
				return full, nil
			}
			if r.Outcome == cellguardpb.Outcome_OUTCOME_DELETED {
				if e := s.checkDropped(ctx, ds, true); e != nil {
					return declog.Record{}, e
				}
			}
			from = r.Seq + 1
		}
		if settled {
			return s.earlierDecision(ctx, ds, id, attemptID(id, a.version))
		}
	}
}

// stagedSettled reports whether the staged message at seq is gone from
// the staging stream (a work queue: the committer removes a message by
// acking it). False when that cannot be read.
func (s *Server) stagedSettled(ctx context.Context, seq uint64) bool {
	stream, err := s.txnStream(ctx)
	if err != nil {
		return false
	}
	_, err = stream.GetMsg(ctx, seq)
	return errors.Is(err, jetstream.ErrMsgNotFound)
}

// txnStream is the staging stream's handle, looked up once.
func (s *Server) txnStream(ctx context.Context) (jetstream.Stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.staging != nil {
		return s.staging, nil
	}
	stream, err := s.cfg.JetStream.Stream(ctx, s.sc.TxnStream())
	if err != nil {
		return nil, err
	}
	s.staging = stream
	return stream, nil
}

// earlierDecision answers an attempt the committer settled with no
// decision of its own: its transaction's uuid (or the attempt's identity)
// was decided before the attempt was staged — an earlier attempt, at an
// earlier read version than the one lookup searched from, was refused or
// committed — so the committer acked it as decided. The whole log of the
// table is searched, once, for that decision. Not found (a replica's
// direct gets behind the log), the caller is asked to retry.
func (s *Server) earlierDecision(ctx context.Context, ds, uuid, attempt string) (declog.Record, *Error) {
	for r, err := range s.cfg.Log.Scan(ctx, s.sc.DecOf(ds), 1, declog.ScanOptions{HeadersOnly: true}) {
		if err != nil {
			return declog.Record{}, errorf(http.StatusServiceUnavailable, CodeServiceUnavailable, "transaction %s: look for its decision: %v: retry to get it", uuid, err)
		}
		if r.TxnID == uuid || r.TxnID == attempt {
			full, err := s.cfg.Log.At(ctx, r.Seq)
			if err != nil {
				return declog.Record{}, internal(err)
			}
			return full, nil
		}
	}
	return declog.Record{}, errorf(http.StatusServiceUnavailable, CodeServiceUnavailable, "transaction %s: its staged message was settled and its decision is not in the log read: retry to get it", uuid)
}

// headerValue makes s one header line of at most n bytes.
func headerValue(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}

// answer turns a decision on a proposal of version v into the response:
// the committed version once its manifest is in storage, or the
// rejection.
func (s *Server) answer(ctx context.Context, t *tableState, ds string, v uint64, rec declog.Record, clk *stageClock) (any, *Error) {
	if !rec.Committed() {
		return nil, s.rejected(ctx, t, ds, v, rec)
	}
	if tv, ok := s.publishCommitted(ctx, t, ds, rec); ok {
		clk.done("publish")
		return map[string]any{"version": tv}, nil
	}
	ok, err := s.published(ctx, t.loc, rec.Version, s.cfg.CommitTimeout)
	if err != nil {
		return nil, internal(err)
	}
	if !ok {
		return nil, errorf(http.StatusServiceUnavailable, CodeServiceUnavailable,
			"transaction %s committed as version %d, not published yet: retry to get it", rec.TxnID, rec.Version)
	}
	clk.done("publish")
	tv, ok, err := s.versionEntry(ctx, t, rec.Version)
	if err != nil || !ok {
		return nil, internal(fmt.Errorf("version %d published but not readable: %v", rec.Version, err))
	}
	clk.done("answer")
	return map[string]any{"version": tv}, nil
}

// rejected maps a rejection of a proposal of version v to the error the
// client gets. A retryable conflict is ConcurrentModification (the client
// rebases on the newer versions, which are published first) when version
// v exists: Lance 12 answers a 409 by reading version v back
// (version/describe) and comparing its transaction with its own, and a
// version it cannot read back ends its call as "commit result unknown".
// A retryable conflict at a version that does not exist, and every other
// reason, is final.
func (s *Server) rejected(ctx context.Context, t *tableState, ds string, v uint64, rec declog.Record) *Error {
	rej := rejection.FromDecision(rec.Decision)
	reason := rec.Decision.GetReason()
	switch reason {
	case cellguardpb.Reason_CONFLICT_RETRYABLE, cellguardpb.Reason_VERSION_MOVED:
		if h, ok, e := s.head(ctx, ds); e == nil && ok && h.Version >= v {
			_, _ = s.published(ctx, t.loc, h.Version, publishWait)
			return &Error{Status: http.StatusConflict, Code: CodeConcurrentModification, Msg: rej.Error(), Reason: reason.String()}
		}
	}
	// rej.Error() names the reason (PRECONDITION_FAILED, …) and details.
	e := &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Final: true, Msg: rej.Error(), Reason: reason.String()}
	if reason == cellguardpb.Reason_MANIFEST_MISMATCH {
		e.Detail = rec.Decision.GetMessage() // names the differing fields
	}
	return e
}

// verify checks the client's manifest against the table model: it must
// equal Apply of the (rebased) transaction on the head, apart from the
// fields a writer stamps. It returns the refusal to stage with the
// transaction, or nil: a transaction the rebase finds in conflict is left
// to the committer, which rejects it with the conflict. An error is
// trouble reading storage or the log, not a verdict.
func (s *Server) verify(ctx context.Context, t *tableState, ds string, h declog.Record, exists bool, st *staged) (*refusal, *Error) {
	want, err := s.expected(ctx, t, ds, h, exists, st.txn, st.manifest.GetDataFormat().GetVersion())
	switch {
	case errors.Is(err, table.ErrMalformed), errors.Is(err, table.ErrInvalidTransaction),
		errors.Is(err, table.ErrUnsupportedOperation), errors.Is(err, errBadReadVersion):
		return &refusal{reason: cellguardpb.Reason_INVALID_TRANSACTION, msg: err.Error()}, nil
	case err != nil:
		return nil, internal(err)
	}
	if want == nil {
		return nil, nil
	}
	if diff := table.ManifestDiff(want.Proto(), st.manifest); len(diff) > 0 {
		err := &table.ManifestMismatchError{Version: want.Version(), Fields: diff}
		return &refusal{reason: cellguardpb.Reason_MANIFEST_MISMATCH, msg: err.Error()}, nil
	}
	return nil, nil
}

// expected computes the manifest the commit must produce, or nil when the
// rebase finds a conflict (the committer will reject it). A creation
// takes the client's storage version when no data file tells it, as the
// committer does (subject.HdrStorageVersion).
func (s *Server) expected(ctx context.Context, t *tableState, ds string, h declog.Record, exists bool, txn *lancepb.Transaction, storageVersion string) (*table.Manifest, error) {
	l := s.cfg.Log
	if !exists {
		if !declog.ValidStorageVersion(storageVersion) {
			storageVersion = "" // not one a dataset may have: the default, and the manifests differ
		}
		return declog.CreateAs(txn, storageVersion)
	}
	rv := txn.GetReadVersion()
	if rv == 0 || rv > h.Version {
		return nil, fmt.Errorf("%w: read_version %d is not a version of %s (head %d)", errBadReadVersion, rv, ds, h.Version)
	}
	head, _, err := s.manifestAt(ctx, t, ds, h.Version, h)
	if err != nil {
		return nil, err
	}
	if rv < h.Version {
		in := table.RebaseInput{Txn: txn, Head: head, Deletions: newDeletions(t.loc)}
		var from uint64
		if in.Read, from, err = s.manifestAt(ctx, t, ds, rv, h); err != nil {
			return nil, err
		}
		for r, err := range l.Scan(ctx, s.sc.Dec(ds, subject.Committed), from+1, declog.ScanOptions{To: h.Seq, After: rv}) {
			if err != nil {
				return nil, err
			}
			other, err := r.Txn()
			if err != nil {
				return nil, err
			}
			in.Committed = append(in.Committed, table.Committed{Version: r.Version, Txn: other})
		}
		res, err := table.Rebase(ctx, in)
		if err != nil {
			return nil, err
		}
		if res.Conflict != nil {
			return nil, nil
		}
		txn = res.Txn
	}
	return table.Apply(ctx, head, txn, l.Versions(ds))
}

// publishCommitted lays committed version rec.Version out in storage
// itself, as the publisher does (publish.WriteVersion, racing it
// harmlessly: whichever creates the manifest first, the other finds it
// there with the same transaction), so the answer need not wait for the
// publisher. It does so only without reading the log — it holds the
// manifest of the version before (the table's recent manifests), and
// replays the decision on it as the publisher would — and only when the
// version before is in storage with the log's transaction: versions are
// laid out in order, a publisher resumes after the newest one in
// storage, and stops at a foreign one. Otherwise, or when
// storage fails, it returns false and the answer waits for the
// publisher. The caller holds the table's commit lock.
func (s *Server) publishCommitted(ctx context.Context, t *tableState, ds string, rec declog.Record) (tableVersion, bool) {
	v := rec.Version
	var base *table.Manifest
	if v > 1 {
		lm, ok := t.recent.at(v - 1)
		if !ok {
			return tableVersion{}, false
		}
		base = lm.m
		if t.stored < v-1 {
			// Not written here: it must be there, and ours (a
			// foreign version stops the publisher, and this too).
			f, err := publish.ReadVersion(ctx, t.loc, v-1)
			if err != nil {
				return tableVersion{}, false
			}
			prev, err := s.cfg.Log.At(ctx, lm.seq)
			if err != nil || prev.TxnID == "" || prev.TxnID != publish.TxnID(f) {
				return tableVersion{}, false
			}
			t.stored = v - 1
		}
	}
	cfg, err := s.datasetConfig(ctx, t, ds)
	if err != nil {
		return tableVersion{}, false
	}
	m, txn, err := declog.Replay(ctx, base, rec, s.cfg.Log.Versions(ds))
	if err != nil {
		s.cfg.Logger.Warn("namespace: replay of a committed version failed; waiting for the publisher", "table", ds, "version", v, "err", err)
		return tableVersion{}, false
	}
	size, err := publish.WriteVersion(ctx, t.loc, ds, cfg.GetStorageVersion(), m, txn, time.Now())
	if err != nil {
		s.cfg.Logger.Warn("namespace: writing a committed version failed; waiting for the publisher", "table", ds, "version", v, "err", err)
		return tableVersion{}, false
	}
	t.stored = max(t.stored, v)
	if r := &t.recent; len(r.vs) == 0 && v == 1 || len(r.vs) > 0 && r.vs[len(r.vs)-1].m.Version()+1 == v {
		r.add(logManifest{m: m, seq: rec.Seq})
	}
	if size < 0 { // written by the publisher first
		tv, ok, err := s.versionEntry(ctx, t, v)
		return tv, err == nil && ok
	}
	return tableVersion{Version: v, ManifestPath: objectPath(t.locURL, manifestKey(v)), ManifestSize: size}, true
}
