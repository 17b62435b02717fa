package committer

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"cellguard/evaluator"
	"cellguard/internal/declog"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// staged is one message from CG_TXN as the decision core sees it.
type staged struct {
	seq   uint64 // CG_TXN stream sequence
	data  []byte // the body: Lance Transaction bytes, or anything a producer sent
	msgID string // Nats-Msg-Id header, if any
}

// verdict is the decision core's answer for one staged message.
type verdict struct {
	skip      bool                  // decided before: ack, append nothing
	broken    error                 // errBrokenState: decide nothing, stop
	rec       *cellguardpb.Decision // the record to append
	next      *table.Manifest       // committed: the new head
	txn       *lancepb.Transaction  // committed: the transaction as committed
	deletions []deletionWrite       // committed: files to write before appending
	lag       uint64                // head - read version, for metrics
}

// limits are the decision core's settings.
type limits struct {
	maxTxnBytes int
	window      int
	retain      uint64 // 0: all
	maxLag      uint64
	rules       ruleOptions
	// maxRebaseLag bounds how far behind head a transaction may have read
	// and still be landed (0: maxLag only).
	maxRebaseLag uint64
	// indexBytes bounds the change index (0: its default).
	indexBytes int
	// windowBytes bounds the approximate memory of the window's
	// manifests (0: only window, a count, bounds it).
	windowBytes int
	// lanceRoot is the default location root for datasets created
	// without one ("": not published).
	lanceRoot string
	// budget is the committer's memory budget for caches, shared with
	// every other dataset (nil: none).
	budget *cacheBudget
}

// state is everything one dataset's worker knows: the head manifest, a
// window of recent manifests and committed transactions, the decided
// transaction ids, and the log positions used for fencing. It is owned by
// one goroutine and has no I/O of its own: versions outside the window come
// from older (checkpoint + log).
//
// Deciding a batch mutates state provisionally; rollback undoes everything
// since a mark, commit makes it final once the batch is in the log.
type state struct {
	ds        string
	validName bool
	lim       limits
	older     history            // versions before the window; nil means none
	ix        *table.ChangeIndex // kept in step with head

	head       *table.Manifest // nil until the dataset is created
	recent     map[uint64]*table.Manifest
	rcost      map[uint64]int // approximate bytes each manifest in recent keeps alive
	rbytes     int            // sum of rcost
	tcost      map[uint64]int // approximate bytes of each transaction in txns
	tbytes     int            // sum of tcost
	tevicted   uint64         // transactions ≤ tevicted were dropped to fit windowBytes
	txns       map[uint64]*lancepb.Transaction
	versionSeq seqIndex // version → CG_DEC sequence of its record
	decided    idSet
	lastDecSeq uint64 // CG_DEC sequence of the last record on cg.dec.<ds>.*
	lastTxnSeq uint64 // CG_TXN sequence of the last decided message
	txnSeqRec  uint64 // CG_DEC sequence of the log record that set lastTxnSeq (0: decided here)
	journal    []string
	deciding   bool         // within decide: older history may refuse costly work
	evicted    uint64       // versions ≤ evicted are out of the window
	mevicted   uint64       // manifests ≤ mevicted were dropped to fit windowBytes
	share      *budgetShare // this dataset's part of lim.budget; nil without one
	// cfg is the dataset's configuration, from its first committed
	// record (readers.go); nil before creation.
	cfg *cellguardpb.DatasetConfig
}

func newState(ds string, lim limits, older history) *state {
	return &state{
		ds: ds, validName: subject.Validate(ds) == nil, lim: lim, older: older,
		recent: map[uint64]*table.Manifest{}, txns: map[uint64]*lancepb.Transaction{}, rcost: map[uint64]int{}, tcost: map[uint64]int{},
		decided: newIDSet(),
		ix:      table.NewChangeIndex(nil, table.IndexLimits{MaxBytes: lim.indexBytes}),
		share:   joinBudget(lim.budget, ds),
	}
}

// setBase makes m (a checkpoint's manifest) the head of an empty state.
// The change index starts at m: it knows nothing older.
func (s *state) setBase(m *table.Manifest) {
	s.head = m
	s.ix.Rebuild(m)
}

// setHead moves head to next, the version committed by txnID (txnBytes
// long, encoded), and advances the change index with it. The old head
// joins the window of recent manifests.
func (s *state) setHead(next *table.Manifest, txnID string, txnBytes int) {
	if s.head != nil {
		v := s.head.Version()
		s.recent[v] = s.head
		s.rcost[v] = manifestCost(txnBytes)
		s.rbytes += s.rcost[v]
	}
	s.head = next
	if err := s.ix.Advance(next, txnID); err != nil {
		s.ix.Rebuild(next) // out of step: start again from here
	}
}

// syncIndex makes sure the change index ends at head; it always does
// unless a code path moved head without it, and then the index restarts
// from head rather than answer for another version.
func (s *state) syncIndex() {
	if s.ix.Head() != s.head {
		s.ix.Rebuild(s.head)
	}
}

// headVersion returns the head version, 0 before creation.
func (s *state) headVersion() uint64 {
	if s.head == nil {
		return 0
	}
	return s.head.Version()
}

// Manifest implements history (and table.Versions).
func (s *state) Manifest(ctx context.Context, v uint64) (*table.Manifest, error) {
	if s.head != nil && v == s.head.Version() {
		return s.head, nil
	}
	if m, ok := s.recent[v]; ok {
		return m, nil
	}
	if v == 0 || v > s.headVersion() || s.older == nil {
		return nil, fmt.Errorf("manifest %s@%d: %w", s.ds, v, table.ErrVersionNotFound)
	}
	return s.older.Manifest(ctx, v)
}

// Committed implements history.
func (s *state) Committed(ctx context.Context, v uint64) (*lancepb.Transaction, error) {
	if t, ok := s.txns[v]; ok {
		return t, nil
	}
	if v == 0 || v > s.headVersion() || s.older == nil {
		return nil, fmt.Errorf("transaction %s@%d: %w", s.ds, v, table.ErrVersionNotFound)
	}
	return s.older.Committed(ctx, v)
}

// decide decides one staged message against the current (provisional)
// state and, unless it is a skip, records the result in the state.
func (s *state) decide(ctx context.Context, in staged) verdict {
	s.deciding = true
	defer func() { s.deciding = false }()
	id, txn, op, decodeErr := s.identify(in)
	if s.decided.has(id) {
		return verdict{skip: true}
	}
	rec := &cellguardpb.Decision{Dataset: s.ds, TxnUuid: id, TxnSeq: in.seq, HeadVersion: s.headVersion()}
	if txn != nil {
		rec.ReadVersion = txn.GetReadVersion()
	}
	v, rej := s.judge(ctx, in, txn, op, decodeErr, rec)
	if v.broken != nil {
		return v
	}
	if rej != nil {
		rec.Outcome = cellguardpb.Outcome_OUTCOME_REJECTED
		rec.Reason = rej.reason
		rec.Message = rej.msg
		rec.Violations = rej.violations
		rec.ConflictVersion, rec.ConflictTxnUuid = rej.conflictVersion, rej.conflictTxn
		if txn != nil && decodeErr == nil {
			rec.Transaction = in.data // as staged, for whoever recomputes it
		}
		v = verdict{rec: rec}
	}
	if rec.ReadVersion > 0 && rec.ReadVersion <= s.headVersion() {
		v.lag = s.headVersion() - rec.ReadVersion
	}
	s.record(v, in.seq)
	return v
}

// identify finds the transaction's identity: the body's uuid when it
// decodes and is a valid id, else the Nats-Msg-Id the producer set when
// that is valid, else the stream sequence (subject.AnonymousTxnID, a
// namespace no valid id can take). A body whose uuid is not a valid id is
// rejected (decodeErr) under the fallback identity, so two messages never
// share an identity by accident or by choice.
func (s *state) identify(in staged) (string, *lancepb.Transaction, table.Op, error) {
	if len(in.data) > s.lim.maxTxnBytes {
		return fallbackID(in), nil, table.OpUnknown, nil
	}
	txn, op, err := table.DecodeTransaction(in.data)
	if txn == nil {
		return fallbackID(in), txn, op, err
	}
	if idErr := subject.ValidTxnID(txn.GetUuid()); idErr != nil {
		if err == nil {
			err = fmt.Errorf("transaction uuid: %w", idErr)
		}
		return fallbackID(in), txn, op, err
	}
	return txn.GetUuid(), txn, op, err
}

func fallbackID(in staged) string {
	if subject.ValidTxnID(in.msgID) == nil {
		return in.msgID
	}
	return subject.AnonymousTxnID(in.seq)
}

// judge runs the protocol's checks in order. It returns the committed
// verdict or the first rejection.
func (s *state) judge(ctx context.Context, in staged, txn *lancepb.Transaction, op table.Op, decodeErr error, rec *cellguardpb.Decision) (verdict, *rejection) {
	switch {
	case !s.validName:
		return verdict{}, reject(cellguardpb.Reason_INVALID_DATASET_NAME, "%v", subject.Validate(s.ds))
	case len(in.data) > s.lim.maxTxnBytes:
		return verdict{}, reject(cellguardpb.Reason_TOO_LARGE, "transaction is %d bytes, the limit is %d", len(in.data), s.lim.maxTxnBytes)
	case decodeErr != nil:
		return verdict{}, reject(cellguardpb.Reason_INVALID_TRANSACTION, "%v", decodeErr)
	}
	if rej := checkReaders(s.cfg, op); rej != nil {
		return verdict{}, rej
	}
	rv := txn.GetReadVersion()
	if op == table.OpOverwrite && rv == 0 {
		return s.create(ctx, txn, rec)
	}
	head := s.head
	switch {
	case head == nil:
		return verdict{}, reject(cellguardpb.Reason_UNKNOWN_DATASET, "dataset %q has no committed version; create it with an Overwrite at read_version 0", s.ds)
	case rv == 0:
		return verdict{}, reject(cellguardpb.Reason_INVALID_TRANSACTION, "read_version 0 is only valid for a creating Overwrite")
	case rv > head.Version():
		return verdict{}, reject(cellguardpb.Reason_READ_VERSION_IN_FUTURE, "read_version %d is ahead of head %d", rv, head.Version())
	case head.Version()-rv > s.lim.maxLag:
		return verdict{}, reject(cellguardpb.Reason_READ_VERSION_TOO_OLD, "read_version %d is %d versions behind head %d (limit %d)", rv, head.Version()-rv, head.Version(), s.lim.maxLag)
	case s.lim.retain > 0 && head.Version()-rv > s.lim.retain:
		return verdict{}, reject(cellguardpb.Reason_READ_VERSION_TOO_OLD, "read_version %d is older than the %d retained versions", rv, s.lim.retain)
	}
	pre, err := evaluator.CheckTransaction(txn, s.lim.rules.limits)
	if err != nil {
		return verdict{}, reject(cellguardpb.Reason_INVALID_PRECONDITION, "%v", err)
	}
	s.syncIndex()
	p := pinner{s: s, rv: rv}
	if err := s.checkReadSchema(ctx, txn, pre, &p); err != nil {
		return verdict{}, asRejection(err)
	}
	opts := s.lim.rules
	opts.hist = s
	if err := checkPreconditions(ctx, s.ix, rv, pre, func() (*table.Manifest, error) { return p.pin(ctx) }, opts); err != nil {
		if errors.Is(err, errBrokenState) {
			return verdict{broken: err}, nil
		}
		return verdict{}, asRejection(err)
	}
	if err := s.checkRebaseLag(rv); err != nil {
		return verdict{}, err
	}
	pinned, err := p.pin(ctx)
	if err != nil {
		return verdict{}, pinRejection(rv, err)
	}
	rebased, dels, err := land(ctx, pinned, head, txn, opts)
	if err != nil {
		return verdict{}, asRejection(err)
	}
	next, err := applyTxn(ctx, head, rebased, s)
	if err != nil {
		return verdict{}, asRejection(err)
	}
	return s.finish(next, rebased, dels, rec)
}

// pinner loads the manifest at a read version at most once per decision,
// and only when something needs the whole manifest: landing, or a check
// the change index cannot answer because the read version is older than
// its horizon.
type pinner struct {
	s      *state
	rv     uint64
	pinned *table.Manifest
	err    error
	done   bool
}

func (p *pinner) pin(ctx context.Context) (*table.Manifest, error) {
	if !p.done {
		p.pinned, p.err = p.s.Manifest(ctx, p.rv)
		p.done = true
	}
	return p.pinned, p.err
}

func pinRejection(rv uint64, err error) *rejection {
	if errors.Is(err, table.ErrVersionNotFound) {
		return reject(cellguardpb.Reason_READ_VERSION_TOO_OLD, "read_version %d is no longer retained: %v", rv, err)
	}
	return reject(cellguardpb.Reason_INTERNAL, "load read_version %d: %v", rv, err)
}

// checkReadSchema checks that the new data files of txn name fields of
// the schema at its read version (not a precondition, but it too needs the
// read version). The schema comes from the change index when it covers
// the read version; otherwise from the pinned manifest, loaded only if the
// transaction can still get anywhere: it has preconditions to evaluate, or
// its lag is within what the committer rebases.
func (s *state) checkReadSchema(ctx context.Context, txn *lancepb.Transaction, pre []evaluator.Precondition, p *pinner) error {
	var schema *table.Schema
	if w, ok := s.ix.At(p.rv); ok {
		schema = w.Schema()
	} else {
		if len(pre) == 0 {
			if err := s.checkRebaseLag(p.rv); err != nil {
				return err
			}
		}
		m, err := p.pin(ctx)
		if err != nil {
			return pinRejection(p.rv, err)
		}
		schema = m.Schema()
	}
	if err := table.CheckFileFields(txn, schema); err != nil {
		return reject(cellguardpb.Reason_INVALID_TRANSACTION, "%v", err)
	}
	return nil
}

// checkRebaseLag refuses to land a transaction read more than
// maxRebaseLag versions behind head: landing it would read every
// transaction committed since (conflict checks and rebase), from the log
// once they are out of the window. The rejection is retryable: re-read
// and try again.
func (s *state) checkRebaseLag(rv uint64) *rejection {
	lag := s.headVersion() - rv
	if s.lim.maxRebaseLag > 0 && lag > s.lim.maxRebaseLag {
		return reject(cellguardpb.Reason_READ_VERSION_TOO_OLD, "read_version %d is %d versions behind head %d; the committer rebases at most %d: re-read and retry", rv, lag, s.headVersion(), s.lim.maxRebaseLag)
	}
	return nil
}

func (s *state) create(ctx context.Context, txn *lancepb.Transaction, rec *cellguardpb.Decision) (verdict, *rejection) {
	if s.head != nil {
		return verdict{}, reject(cellguardpb.Reason_DATASET_EXISTS, "dataset %q exists at version %d", s.ds, s.head.Version())
	}
	if len(txn.GetPreconditions()) > 0 {
		return verdict{}, reject(cellguardpb.Reason_INVALID_PRECONDITION, "preconditions are not allowed when creating a dataset")
	}
	if _, adopting := txn.GetTransactionProperties()[declog.AdoptProperty]; adopting {
		return s.adopt(txn, rec)
	}
	cfg, rej := creationConfig(txn, s.ds, s.lim.lanceRoot)
	if rej != nil {
		return verdict{}, rej
	}
	rec.DatasetConfig = cfg
	next, err := applyTxn(ctx, nil, txn, s)
	if err != nil {
		return verdict{}, asRejection(err)
	}
	return s.finish(next, txn, nil, rec)
}

// finish checks the new manifest's version and fills the committed record.
func (s *state) finish(next *table.Manifest, txn *lancepb.Transaction, dels []deletionWrite, rec *cellguardpb.Decision) (verdict, *rejection) {
	if want := s.headVersion() + 1; next.Version() != want {
		return verdict{}, reject(cellguardpb.Reason_INTERNAL, "apply produced version %d, want %d", next.Version(), want)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(txn)
	if err != nil {
		return verdict{}, reject(cellguardpb.Reason_INTERNAL, "encode committed transaction: %v", err)
	}
	rec.Outcome = cellguardpb.Outcome_OUTCOME_COMMITTED
	rec.Version = next.Version()
	rec.Transaction = b
	return verdict{rec: rec, next: next, txn: txn, deletions: dels}, nil
}

// asRejection turns an error from the rules into a rejection.
func asRejection(err error) *rejection {
	var r *rejection
	if errors.As(err, &r) {
		return r
	}
	return &rejection{reason: errorReason(err), msg: err.Error()}
}

// record applies a verdict to the provisional state.
func (s *state) record(v verdict, txnSeq uint64) {
	s.decided.add(v.rec.TxnUuid)
	s.journal = append(s.journal, v.rec.TxnUuid)
	if txnSeq > s.lastTxnSeq {
		s.lastTxnSeq = txnSeq
	}
	if v.next == nil {
		return
	}
	if s.head == nil {
		s.cfg = v.rec.GetDatasetConfig()
	}
	s.setHead(v.next, v.rec.TxnUuid, len(v.rec.Transaction))
	s.keepTxn(v.next.Version(), v.txn, len(v.rec.Transaction))
	s.padVersions(v.next.Version())
	s.versionSeq.push(0) // filled in by commit
}

// mark is a point to roll back to.
type mark struct {
	head       *table.Manifest
	lastDecSeq uint64
	lastTxnSeq uint64
	journal    int
	versions   uint64 // top of the version index
}

func (s *state) mark() mark {
	return mark{head: s.head, lastDecSeq: s.lastDecSeq, lastTxnSeq: s.lastTxnSeq, journal: len(s.journal), versions: s.versionSeq.top()}
}

// rollback forgets everything decided since m.
func (s *state) rollback(m mark) {
	for _, id := range s.journal[m.journal:] {
		s.decided.remove(id)
	}
	s.journal = s.journal[:m.journal]
	for v := m.versions + 1; v <= s.versionSeq.top(); v++ {
		s.dropManifest(v)
		s.dropTxn(v)
	}
	if m.head != nil {
		s.dropManifest(m.head.Version())
	}
	s.versionSeq.truncate(m.versions)
	s.ix.Rollback(m.head)
	s.head, s.lastDecSeq, s.lastTxnSeq = m.head, m.lastDecSeq, m.lastTxnSeq
	if s.head == nil { // an undone creation or adoption
		s.cfg = nil
		s.versionSeq = seqIndex{}
	}
}

// commit makes the decisions since m final: recs[i] was stored at CG_DEC
// sequence seqs[i].
func (s *state) commit(m mark, recs []*cellguardpb.Decision, seqs []uint64) {
	for i, r := range recs {
		if r.Outcome == cellguardpb.Outcome_OUTCOME_COMMITTED {
			s.versionSeq.set(r.Version, seqs[i])
		}
	}
	if len(seqs) > 0 {
		s.lastDecSeq = seqs[len(seqs)-1]
	}
	s.journal = s.journal[:0]
	s.evict()
	s.evictByCost()
	s.fitBudget()
}

// evict drops manifests and transactions that fell out of the window.
// The window slides forward only, so each version is dropped once.
func (s *state) evict() {
	h := s.headVersion()
	if h <= uint64(s.lim.window) {
		return
	}
	floor := h - uint64(s.lim.window)
	for v := s.evicted + 1; v <= floor; v++ {
		s.dropManifest(v)
		s.dropTxn(v)
	}
	s.evicted = max(s.evicted, floor)
}

// evictByCost drops the oldest manifests of the window until what they
// keep alive fits windowBytes. Their transactions stay (they are small and
// landing reads them); a read version whose manifest is gone is pinned
// from older history when needed.
func (s *state) evictByCost() {
	if s.lim.windowBytes <= 0 {
		return
	}
	for v := s.mevicted + 1; s.rbytes > s.lim.windowBytes && v < s.headVersion(); v++ {
		s.dropManifest(v)
		s.mevicted = v
	}
	for v := s.tevicted + 1; s.tbytes > s.lim.windowBytes && v < s.headVersion(); v++ {
		s.dropTxn(v)
		s.tevicted = v
	}
}

// keepTxn adds the transaction committed at v (n bytes encoded) to the
// window.
func (s *state) keepTxn(v uint64, txn *lancepb.Transaction, n int) {
	s.dropTxn(v)
	s.txns[v] = txn
	s.tcost[v] = txnCost(n)
	s.tbytes += s.tcost[v]
}

func (s *state) dropTxn(v uint64) {
	if _, ok := s.txns[v]; !ok {
		return
	}
	delete(s.txns, v)
	s.tbytes -= s.tcost[v]
	delete(s.tcost, v)
}

// txnCost approximates a decoded transaction's memory from its encoded
// size: protobuf messages in memory take several times their wire size
// (measured: 5.4 times for appends of 16 and 256 one-file fragments).
func txnCost(n int) int { return 256 + 6*n }

func (s *state) dropManifest(v uint64) {
	if _, ok := s.recent[v]; !ok {
		return
	}
	delete(s.recent, v)
	s.rbytes -= s.rcost[v]
	delete(s.rcost, v)
}

// manifestCost approximates the memory a manifest in the window keeps
// alive that no later manifest shares: the fragment-trie nodes on the
// paths its successor changed (compressed nodes of up to a few hundred
// bytes, a few levels deep, in two maps) and the version's own header. The
// successor's encoded transaction size stands in for how much changed.
// The constants were measured with BenchmarkResidentDatasets when trie
// nodes were full 32-slot arrays (about 7 KiB for a one-fragment append);
// with compressed nodes they overestimate, which errs on the safe side.
func manifestCost(txnBytes int) int { return 6<<10 + 8*txnBytes }

// replay folds one record of the decision log into the state, as when
// catching up after a fence. Committed records are applied with the same
// function deciding uses; the result must carry the recorded version.
func (s *state) replay(ctx context.Context, r declog.Record) error {
	if r.Committed() {
		if err := s.advance(ctx, r); err != nil {
			return err
		}
		s.padVersions(r.Version)
		s.versionSeq.push(r.Seq)
	}
	s.noteLogged(r)
	return nil
}

// errReplay reports a committed record that does not replay onto the
// version before it: the record, not the reading of it, is at fault.
var errReplay = errors.New("committed record does not replay")

// contentError reports whether err is about what a record holds (it
// does not decode, or its transaction does not apply), as opposed to a
// failure to read something.
func contentError(err error) bool {
	return errors.Is(err, declog.ErrMalformedRecord) || errors.Is(err, table.ErrMalformed) ||
		errors.Is(err, table.ErrInvalidTransaction) || errors.Is(err, table.ErrUnsupportedOperation)
}

// noteLogged folds a log record's identity and sequences into the state.
func (s *state) noteLogged(r declog.Record) {
	s.decided.add(r.TxnID)
	s.lastDecSeq = r.Seq
	if r.TxnSeq > s.lastTxnSeq {
		s.lastTxnSeq, s.txnSeqRec = r.TxnSeq, r.Seq
	}
}

// checkDecided confirms that a staged message at or below the last
// decided staging sequence, about to be acked without a decision of its
// own, really has one: its identity is among the decided ones. If not,
// a log record claimed a staging sequence it did not decide (a forged or
// corrupt Cg-Txn-Seq), and acking would lose the message.
func (s *state) checkDecided(in staged) error {
	id, txn, _, _ := s.identify(in)
	if s.decided.has(id) || s.decided.has(fallbackID(in)) || txn != nil && s.decided.has(txn.GetUuid()) {
		return nil
	}
	return fmt.Errorf("%w: staged message %d (identity %q) has no decision, yet log record %d says staging sequence %d is decided",
		errUntrustedLog, in.seq, id, s.txnSeqRec, s.lastTxnSeq)
}

// checkStagedSeq checks the log's claim about staging against CG_TXN: no
// record can have decided a staging sequence beyond the last one the
// staging stream ever assigned (lastStaged, read after the log).
func (s *state) checkStagedSeq(lastStaged uint64) error {
	if s.lastTxnSeq > lastStaged {
		return fmt.Errorf("%w: log record %d of %s claims staging sequence %d, beyond the last staged sequence %d",
			errUntrustedLog, s.txnSeqRec, s.ds, s.lastTxnSeq, lastStaged)
	}
	return nil
}

// advance applies a committed record to the head manifest.
func (s *state) advance(ctx context.Context, r declog.Record) error {
	adoption := s.head == nil && r.Decision.GetAdoptedManifest() != nil // declog.Replay checks it
	if want := s.headVersion() + 1; r.Version != want && !adoption {
		return fmt.Errorf("%w: %s: log record %d has version %d, want %d", errReplay, s.ds, r.Seq, r.Version, want)
	}
	next, txn, err := declog.Replay(ctx, s.head, r, s)
	if err != nil {
		if contentError(err) {
			return fmt.Errorf("%w: %s: %w", errReplay, s.ds, err)
		}
		return fmt.Errorf("replay %s: %w", s.ds, err)
	}
	if s.head == nil {
		s.cfg = r.Decision.GetDatasetConfig()
	}
	s.setHead(next, r.TxnID, len(r.Decision.GetTransaction()))
	s.keepTxn(r.Version, txn, len(r.Decision.GetTransaction()))
	s.evict()
	s.evictByCost()
	return nil
}

// idSet holds decided transaction ids; uuids are stored as 16 bytes.
type idSet struct {
	u map[[16]byte]struct{}
	s map[string]struct{}
}

func newIDSet() idSet { return idSet{u: map[[16]byte]struct{}{}, s: map[string]struct{}{}} }

func uuidKey(id string) ([16]byte, bool) {
	var k [16]byte
	if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' {
		return k, false
	}
	h := id[0:8] + id[9:13] + id[14:18] + id[19:23] + id[24:36]
	if strings.ToLower(h) != h {
		return k, false // keep case-distinct ids distinct
	}
	if _, err := hex.Decode(k[:], []byte(h)); err != nil {
		return k, false
	}
	return k, true
}

func (d idSet) has(id string) bool {
	if k, ok := uuidKey(id); ok {
		_, found := d.u[k]
		return found
	}
	_, found := d.s[id]
	return found
}

func (d idSet) add(id string) {
	if k, ok := uuidKey(id); ok {
		d.u[k] = struct{}{}
		return
	}
	d.s[id] = struct{}{}
}

func (d idSet) remove(id string) {
	if k, ok := uuidKey(id); ok {
		delete(d.u, k)
		return
	}
	delete(d.s, id)
}

func (d idSet) len() int { return len(d.u) + len(d.s) }
