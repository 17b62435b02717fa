package committer

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

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
	older     history // versions before the window; nil means none

	head       *table.Manifest // nil until the dataset is created
	recent     map[uint64]*table.Manifest
	txns       map[uint64]*lancepb.Transaction
	versionSeq []uint64 // versionSeq[v-1]: CG_DEC sequence of version v's record
	decided    idSet
	lastDecSeq uint64 // CG_DEC sequence of the last record on cg.dec.<ds>.*
	lastTxnSeq uint64 // CG_TXN sequence of the last decided message
	journal    []string
	evicted    uint64 // versions ≤ evicted are out of the window
}

func newState(ds string, lim limits, older history) *state {
	return &state{
		ds: ds, validName: subject.Validate(ds) == nil, lim: lim, older: older,
		recent: map[uint64]*table.Manifest{}, txns: map[uint64]*lancepb.Transaction{},
		decided: newIDSet(),
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
// decodes, else the Nats-Msg-Id the producer set, else the stream sequence.
func (s *state) identify(in staged) (string, *lancepb.Transaction, table.Op, error) {
	if len(in.data) > s.lim.maxTxnBytes {
		return fallbackID(in), nil, table.OpUnknown, nil
	}
	txn, op, err := table.DecodeTransaction(in.data)
	if txn != nil && txn.GetUuid() != "" && validID(txn.GetUuid()) {
		return txn.GetUuid(), txn, op, err
	}
	if err == nil {
		err = errors.New("transaction has no valid uuid")
	}
	return fallbackID(in), txn, op, err
}

func fallbackID(in staged) string {
	if in.msgID != "" && validID(in.msgID) {
		return in.msgID
	}
	return subject.AnonymousTxnID(in.seq)
}

// validID accepts identities usable in a Nats-Msg-Id: printable, no spaces,
// bounded.
func validID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	return strings.IndexFunc(id, func(r rune) bool { return r <= ' ' || r > '~' }) < 0
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
	pinned, err := s.Manifest(ctx, rv)
	if err != nil {
		if errors.Is(err, table.ErrVersionNotFound) {
			return verdict{}, reject(cellguardpb.Reason_READ_VERSION_TOO_OLD, "read_version %d is no longer retained: %v", rv, err)
		}
		return verdict{}, reject(cellguardpb.Reason_INTERNAL, "load read_version %d: %v", rv, err)
	}
	opts := s.lim.rules
	opts.hist = s
	if err := checkPreconditions(ctx, pinned, head, txn, op, opts); err != nil {
		if errors.Is(err, errBrokenState) {
			return verdict{broken: err}, nil
		}
		return verdict{}, asRejection(err)
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

func (s *state) create(ctx context.Context, txn *lancepb.Transaction, rec *cellguardpb.Decision) (verdict, *rejection) {
	if s.head != nil {
		return verdict{}, reject(cellguardpb.Reason_DATASET_EXISTS, "dataset %q exists at version %d", s.ds, s.head.Version())
	}
	if len(txn.GetPreconditions()) > 0 {
		return verdict{}, reject(cellguardpb.Reason_INVALID_PRECONDITION, "preconditions are not allowed when creating a dataset")
	}
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
	if s.head != nil {
		s.recent[s.head.Version()] = s.head
	}
	s.head = v.next
	s.txns[v.next.Version()] = v.txn
	s.versionSeq = append(s.versionSeq, 0) // filled in by commit
}

// mark is a point to roll back to.
type mark struct {
	head       *table.Manifest
	lastDecSeq uint64
	lastTxnSeq uint64
	journal    int
	versions   int
}

func (s *state) mark() mark {
	return mark{head: s.head, lastDecSeq: s.lastDecSeq, lastTxnSeq: s.lastTxnSeq, journal: len(s.journal), versions: len(s.versionSeq)}
}

// rollback forgets everything decided since m.
func (s *state) rollback(m mark) {
	for _, id := range s.journal[m.journal:] {
		s.decided.remove(id)
	}
	s.journal = s.journal[:m.journal]
	for v := uint64(m.versions) + 1; v <= uint64(len(s.versionSeq)); v++ {
		delete(s.recent, v)
		delete(s.txns, v)
	}
	if m.head != nil {
		delete(s.recent, m.head.Version())
	}
	s.versionSeq = s.versionSeq[:m.versions]
	s.head, s.lastDecSeq, s.lastTxnSeq = m.head, m.lastDecSeq, m.lastTxnSeq
}

// commit makes the decisions since m final: recs[i] was stored at CG_DEC
// sequence seqs[i].
func (s *state) commit(m mark, recs []*cellguardpb.Decision, seqs []uint64) {
	for i, r := range recs {
		if r.Outcome == cellguardpb.Outcome_OUTCOME_COMMITTED {
			s.versionSeq[r.Version-1] = seqs[i]
		}
	}
	if len(seqs) > 0 {
		s.lastDecSeq = seqs[len(seqs)-1]
	}
	s.journal = s.journal[:0]
	s.evict()
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
		delete(s.recent, v)
		delete(s.txns, v)
	}
	s.evicted = max(s.evicted, floor)
}

// replay folds one record of the decision log into the state, as when
// catching up after a fence. Committed records are applied with the same
// function deciding uses; the result must carry the recorded version.
func (s *state) replay(ctx context.Context, r declog.Record) error {
	if r.Committed() {
		if err := s.advance(ctx, r); err != nil {
			return err
		}
		s.versionSeq = append(s.versionSeq, r.Seq)
	}
	s.decided.add(r.TxnID)
	s.lastDecSeq = r.Seq
	s.lastTxnSeq = max(s.lastTxnSeq, r.TxnSeq)
	return nil
}

// advance applies a committed record to the head manifest.
func (s *state) advance(ctx context.Context, r declog.Record) error {
	next, txn, err := declog.Replay(ctx, s.head, r, s)
	if err != nil {
		return fmt.Errorf("replay %s: %w", s.ds, err)
	}
	if s.head != nil {
		s.recent[s.head.Version()] = s.head
	}
	s.head = next
	s.txns[r.Version] = txn
	s.evict()
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
