package decide

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go"

	"cellguard/internal/declog"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// staged is one message from CG_TXN as the decision core sees it.
type staged struct {
	seq   uint64 // CG_TXN stream sequence
	data  []byte // the body: Lance Transaction bytes, or anything a producer sent; never changed once received (decoded strings and rejected records share it)
	msgID string // Nats-Msg-Id header, if any

	// hdr holds every header, for the stager's own (refusal.go).
	hdr nats.Header
}

// verdict is the decision core's answer for one staged message.
type verdict struct {
	skip      bool                  // decided before: ack, append nothing
	broken    error                 // errBrokenState: decide nothing, stop
	rec       *cellguardpb.Decision // the record to append
	next      *table.Manifest       // committed: the new head
	txn       *lancepb.Transaction  // committed: the transaction as committed (nil when borrowed: see committedTxn)
	deletions []deletionWrite       // committed: files to write before appending
	lag       uint64                // head - read version, for metrics
	// body is rec encoded once, as the log stores it (nil if it did not
	// encode: the append then encodes it and reports why not).
	body []byte
	// landed, for a committed Append, is the transaction as staged with
	// txn's read version: rec.Transaction, set when the record is
	// encoded (verdict.encode). Zero otherwise.
	landed table.Landed
	// borrowed: txn lives in the state's decoder (table.Decoder), which
	// the next decode reuses. The window keeps rec.Transaction instead,
	// and decide returns txn nil.
	borrowed bool
}

// committedTxn returns the transaction v committed: txn, or, when that
// was borrowed, rec.Transaction decoded again.
func (v verdict) committedTxn() (*lancepb.Transaction, error) {
	if v.txn != nil || v.next == nil {
		return v.txn, nil
	}
	txn, _, err := table.DecodeTransaction(v.rec.GetTransaction())
	return txn, err
}

// encoded returns v's record as declog.Log.AppendEncoded sends it.
func (v verdict) encoded() declog.Encoded {
	return declog.Encoded{Decision: v.rec, Body: v.body}
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
	older     history              // versions before the window; nil means none
	ix        *table.ChangeIndex   // kept in step with head
	cx        *table.ConflictIndex // what the committed transactions touch, back to conflictSpan (statecache.go)
	cxc       conflictCosts        // the bytes of each version cx covers

	head       *table.Manifest                        // nil until the dataset is created
	recent     versionWindow[costed[*table.Manifest]] // with the approximate bytes each keeps alive
	rbytes     int                                    // sum of the costs in recent
	tbytes     int                                    // sum of the costs in txns
	tevicted   uint64                                 // transactions ≤ tevicted were dropped to fit windowBytes
	txns       versionWindow[costed[windowTxn]]       // with their approximate bytes
	versionSeq seqIndex                               // version → CG_DEC sequence of its record
	decided    idSet
	lastDecSeq uint64 // CG_DEC sequence of the last record on cg.dec.<ds>.*
	lastTxnSeq uint64 // CG_TXN sequence of the last decided message
	txnSeqRec  uint64 // CG_DEC sequence of the log record that set lastTxnSeq (0: decided here)
	journal    []string
	dec        *table.Decoder // decodes staged messages, reusing its memory (made at the first)
	deciding   bool           // within decide: older history may refuse costly work
	evicted    uint64         // versions ≤ evicted are out of the window
	mevicted   uint64         // manifests ≤ mevicted were dropped to fit windowBytes
	share      *budgetShare   // this dataset's part of lim.budget; nil without one
	// cfg is the dataset's configuration, from its first committed
	// record (readers.go); nil before creation.
	cfg *cellguardpb.DatasetConfig
	// deleted is the dataset's tombstone once the log holds one
	// (tombstone.go); nil while it lives.
	deleted *tombstone
	// schemas are the schema changes since the state's base, ascending:
	// the schema at any version from schemas[0].v on, whatever the
	// window keeps (a schema changes rarely; see schemaAt).
	schemas []schemaFrom
}

// logState is what a checkpoint carries of the state besides the
// manifest (declog.LogState): the decided ids and the version index. It
// is taken between batches, never with provisional decisions.
func (s *state) logState() *declog.LogState {
	ls := &declog.LogState{IndexFirst: s.versionSeq.first, IndexSeqs: slices.Clone(s.versionSeq.seqs)}
	ls.UUIDs = make([][16]byte, 0, s.decided.n)
	s.decided.each(func(k idKey) { ls.UUIDs = append(ls.UUIDs, k.bytes()) })
	ls.IDs = make([]string, 0, len(s.decided.s))
	for id := range s.decided.s {
		ls.IDs = append(ls.IDs, id)
	}
	return ls
}

// setLogState makes an empty state's decided ids, version index and log
// positions those of checkpoint cp (usableLogState).
func (s *state) setLogState(cp declog.Checkpoint) {
	ls := cp.Log
	for _, u := range ls.UUIDs {
		s.decided.addKey(keyOf(u))
	}
	for _, id := range ls.IDs {
		s.decided.s[id] = struct{}{}
	}
	s.versionSeq = seqIndex{first: ls.IndexFirst, seqs: slices.Clone(ls.IndexSeqs)}
	s.lastDecSeq, s.lastTxnSeq, s.txnSeqRec = cp.DecSeq, cp.TxnSeq, cp.DecSeq
}

// schemaFrom is a schema and the version it took effect at.
type schemaFrom struct {
	v  uint64
	sc *table.Schema
}

// schemaAt returns the schema at version v, if the state knows it.
func (s *state) schemaAt(v uint64) (*table.Schema, bool) {
	i, _ := slices.BinarySearchFunc(s.schemas, v, func(e schemaFrom, v uint64) int { return cmp.Compare(e.v, v+1) })
	if i == 0 || v > s.headVersion() {
		return nil, false // before the first known version
	}
	return s.schemas[i-1].sc, true
}

// noteSchema records m's schema if it differs from the last one.
func (s *state) noteSchema(m *table.Manifest) {
	if n := len(s.schemas); n == 0 || s.schemas[n-1].sc != m.Schema() {
		s.schemas = append(s.schemas, schemaFrom{m.Version(), m.Schema()})
	}
}

func newState(ds string, lim limits, older history) *state {
	return &state{
		ds: ds, validName: subject.Validate(ds) == nil, lim: lim, older: older,
		decided: newIDSet(),
		ix:      table.NewChangeIndex(nil, table.IndexLimits{MaxBytes: lim.indexBytes}),
		cx:      table.NewConflictIndex(),
		share:   joinBudget(lim.budget, ds),
	}
}

// setBase makes m (a checkpoint's manifest) the head of an empty state.
// The change index starts at m: it knows nothing older.
func (s *state) setBase(m *table.Manifest) {
	s.head = m
	s.ix.Rebuild(m)
	s.schemas = []schemaFrom{{m.Version(), m.Schema()}}
}

// setHead moves head to next, the version committed by txnID (txnBytes
// long, encoded), and advances the change index with it. The old head
// joins the window of recent manifests.
func (s *state) setHead(next *table.Manifest, txnID string, txnBytes int) {
	if s.head != nil {
		v := s.head.Version()
		c := costed[*table.Manifest]{s.head, manifestCost(txnBytes)}
		s.recent.set(v, c)
		s.rbytes += c.cost
	}
	s.head = next
	s.noteSchema(next)
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
	if m, ok := s.recent.get(v); ok {
		return m.v, nil
	}
	if v == 0 || v > s.headVersion() || s.older == nil {
		return nil, fmt.Errorf("manifest %s@%d: %w", s.ds, v, table.ErrVersionNotFound)
	}
	return s.older.Manifest(ctx, v)
}

// Committed implements history.
func (s *state) Committed(ctx context.Context, v uint64) (*lancepb.Transaction, error) {
	if t, ok := s.txns.get(v); ok {
		return s.windowed(v, t.v)
	}
	if v == 0 || v > s.headVersion() || s.older == nil {
		return nil, fmt.Errorf("transaction %s@%d: %w", s.ds, v, table.ErrVersionNotFound)
	}
	return s.older.Committed(ctx, v)
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
	s.forgetConflicts(m.versions + 1)
	if m.head != nil {
		s.dropManifest(m.head.Version())
	}
	s.versionSeq.truncate(m.versions)
	s.ix.Rollback(m.head)
	s.head, s.lastDecSeq, s.lastTxnSeq = m.head, m.lastDecSeq, m.lastTxnSeq
	for len(s.schemas) > 0 && (m.head == nil || s.schemas[len(s.schemas)-1].v > m.head.Version()) {
		s.schemas = s.schemas[:len(s.schemas)-1]
	}
	if s.head == nil { // an undone creation or adoption
		s.cfg = nil
		s.versionSeq = seqIndex{}
	}
}

// commit makes the decisions since m final: recs[i] was stored at CG_DEC
// sequence seqs[i].
func (s *state) commit(m mark, recs []*cellguardpb.Decision, seqs []uint64) {
	s.stored(recs, seqs)
	s.journal = s.journal[:0]
	s.evict()
	s.evictByCost()
	s.fitBudget()
}

// commitUnder is commit while the decisions since next, a later mark,
// stay provisional (decided while the batch since m was appending, see
// pipeline.go). next is updated to roll back to the state as it is now
// committed. The window slides up to the committed head only; the budget
// is consulted once nothing is provisional (commit).
func (s *state) commitUnder(m mark, recs []*cellguardpb.Decision, seqs []uint64, next *mark) {
	s.stored(recs, seqs)
	s.journal = append(s.journal[:0], s.journal[next.journal:]...)
	next.journal, next.lastDecSeq = 0, s.lastDecSeq
	if next.head != nil {
		s.evictUpTo(next.head.Version())
		s.evictByCostUpTo(next.head.Version())
	}
}

// stored notes where recs were stored: recs[i] at CG_DEC sequence seqs[i].
func (s *state) stored(recs []*cellguardpb.Decision, seqs []uint64) {
	for i, r := range recs {
		if r.Outcome == cellguardpb.Outcome_OUTCOME_COMMITTED {
			s.versionSeq.set(r.Version, seqs[i])
		}
	}
	if len(seqs) > 0 {
		s.lastDecSeq = seqs[len(seqs)-1]
	}
}

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
	s.noteTombstone(r)
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
	key, txn, _, _, _ := s.identify(in)
	id := key.id
	if s.decided.hasID(key) || s.decided.has(fallbackID(in)) || txn != nil && s.decided.has(txn.GetUuid()) {
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
	s.keepTxn(r.Version, txn, nil, len(r.Decision.GetTransaction()))
	s.evict()
	s.evictByCost()
	return nil
}
