package decide

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"cellguard/internal/logrec"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// staged is one message from CG_TXN as the decision core sees it.
type Staged struct {
	Seq   uint64 // CG_TXN stream sequence
	Data  []byte // the body: Lance Transaction bytes, or anything a producer sent; never changed once received (decoded strings and rejected records share it)
	MsgID string // Nats-Msg-Id header, if any

	// Header holds every header, for the stager's own (refusal.go).
	Header map[string][]string
}

// verdict is the decision core's answer for one staged message.
type Verdict struct {
	Skip      bool                  // decided before: ack, append nothing
	Broken    error                 // ErrBrokenState: decide nothing, stop
	Rec       *cellguardpb.Decision // the record to append
	Next      *table.Manifest       // committed: the new head
	Txn       *lancepb.Transaction  // committed: the transaction as committed (nil when borrowed: see CommittedTxn)
	Deletions []DeletionWrite       // committed: files to write before appending
	Lag       uint64                // head - read version, for metrics
	// body is Rec encoded once, as the log stores it (nil if it did not
	// encode: the append then encodes it and reports why not).
	body []byte
	// landed, for a committed Append, is the transaction as staged with
	// txn's read version: rec.Transaction, set when the record is
	// encoded (verdict.encode). Zero otherwise.
	landed table.Landed
	// borrowed: txn lives in the decision's decoder (table.Decoder),
	// which goes back to the pool when Decide returns, or is large
	// (keepEncodedMin). The window keeps rec.Transaction instead, and
	// decide returns txn nil.
	borrowed bool
}

// CommittedTxn returns the transaction v committed: txn, or, when that
// was borrowed, rec.Transaction decoded again.
func (v Verdict) CommittedTxn() (*lancepb.Transaction, error) {
	if v.Txn != nil || v.Next == nil {
		return v.Txn, nil
	}
	txn, _, err := table.DecodeTransaction(v.Rec.GetTransaction())
	return txn, err
}

// encoded returns v's record as declog.Log.AppendEncoded sends it.
func (v Verdict) Encoded() logrec.Encoded {
	return logrec.Encoded{Decision: v.Rec, Body: v.body}
}

// limits are the decision core's settings.
type Limits struct {
	MaxTxnBytes int         // a staged message's largest body
	Window      int         // recent versions kept in memory
	Retain      uint64      // versions a read version may be behind head; 0: all
	MaxLag      uint64      // versions a read version may be behind head at all
	Rules       RuleOptions // what the rules read beyond the state
	// MaxRebaseLag bounds how far behind head a transaction may have read
	// and still be landed (0: MaxLag only).
	MaxRebaseLag uint64
	// IndexBytes bounds the change index (0: its default).
	IndexBytes int
	// WindowBytes bounds the approximate memory of the window's
	// manifests (0: only Window, a count, bounds it).
	WindowBytes int
	// LanceRoot is the default location root for datasets created
	// without one ("": not published).
	LanceRoot string
	// DatasetLocation joins LanceRoot and a dataset's name into its
	// location (dataplane.DatasetLocation); the core itself knows no URL.
	DatasetLocation func(root, ds string) (string, error)
	// Budget is the committer's memory budget for caches, shared with
	// every other dataset (nil: none).
	Budget Budget
}

// state is everything one dataset's worker knows: the head manifest, a
// window of recent manifests and committed transactions, the decided
// transaction ids, and the log positions used for fencing. It is owned by
// one goroutine and has no I/O of its own: versions outside the window come
// from older (checkpoint + log).
//
// Deciding a batch mutates state provisionally; rollback undoes everything
// since a mark, commit makes it final once the batch is in the log.
type State struct {
	Dataset   string
	validName bool
	Limits    *Limits // shared by every dataset of a committer: not modified
	// Deletions reads this dataset's deletion vectors for the rules,
	// over Limits.Rules.Deletions (nil: that one).
	Deletions     table.DeletionVectors
	Older         History              // versions before the window; nil means none
	ChangeIndex   *table.ChangeIndex   // kept in step with head
	conflicts     *table.ConflictIndex // what the committed transactions touch, back to conflictSpan (statecache.go)
	conflictBytes conflictCosts        // the bytes of each version conflicts covers

	Head               *table.Manifest                        // nil until the dataset is created
	recent             versionWindow[costed[*table.Manifest]] // with the approximate bytes each keeps alive
	recentBytes        int                                    // sum of the costs in recent
	txnBytes           int                                    // sum of the costs in txns
	txnsDroppedTo      uint64                                 // transactions ≤ txnsDroppedTo were dropped to fit WindowBytes
	Txns               versionWindow[costed[windowTxn]]       // with their approximate bytes
	VersionSeq         SeqIndex                               // version → CG_DEC sequence of its record
	Decided            idSet
	LastDecSeq         uint64 // CG_DEC sequence of the last record on cg.dec.<ds>.*
	LastTxnSeq         uint64 // CG_TXN sequence of the last decided message
	txnSeqRec          uint64 // CG_DEC sequence of the log record that set LastTxnSeq (0: decided here)
	journal            []string
	decoder            *table.Decoder // the decision in progress's, from table's pool (nil outside Decide)
	Deciding           bool           // within decide: older history may refuse costly work
	windowFrom         uint64         // versions ≤ windowFrom are out of the window
	manifestsDroppedTo uint64         // manifests ≤ manifestsDroppedTo were dropped to fit WindowBytes
	BudgetShare        BudgetShare    // this dataset's part of Limits.Budget; nil without one
	// Config is the dataset's configuration, from its first committed
	// record (readers.go); nil before creation.
	Config *cellguardpb.DatasetConfig
	// Deleted is the dataset's tombstone once the log holds one
	// (tombstone.go); nil while it lives.
	Deleted *tombstone
	// schemas are the schema changes since the state's base, ascending:
	// the schema at any version from schemas[0].v on, whatever the
	// window keeps (a schema changes rarely; see schemaAt).
	schemas []schemaFrom
}

// logState is what a checkpoint carries of the state besides the
// manifest (logrec.LogState): the decided ids and the version index. It
// is taken between batches, never with provisional decisions.
func (s *State) LogState() *logrec.LogState {
	ls := &logrec.LogState{IndexFirst: s.VersionSeq.First, IndexSeqs: slices.Clone(s.VersionSeq.Seqs)}
	ls.UUIDs = make([][16]byte, 0, s.Decided.n)
	s.Decided.each(func(k idKey) { ls.UUIDs = append(ls.UUIDs, k.bytes()) })
	ls.IDs = make([]string, 0, len(s.Decided.s))
	for id := range s.Decided.s {
		ls.IDs = append(ls.IDs, id)
	}
	return ls
}

// setLogState makes an empty state's decided ids, version index and log
// positions those of checkpoint cp (usableLogState).
func (s *State) SetLogState(cp logrec.Checkpoint) {
	ls := cp.Log
	for _, u := range ls.UUIDs {
		s.Decided.addKey(keyOf(u))
	}
	for _, id := range ls.IDs {
		s.Decided.addString(id)
	}
	s.VersionSeq = SeqIndex{First: ls.IndexFirst, Seqs: slices.Clone(ls.IndexSeqs)}
	s.LastDecSeq, s.LastTxnSeq, s.txnSeqRec = cp.DecSeq, cp.TxnSeq, cp.DecSeq
}

// schemaFrom is a schema and the version it took effect at.
type schemaFrom struct {
	v  uint64
	sc *table.Schema
}

// schemaAt returns the schema at version v, if the state knows it.
func (s *State) schemaAt(v uint64) (*table.Schema, bool) {
	i, _ := slices.BinarySearchFunc(s.schemas, v, func(e schemaFrom, v uint64) int { return cmp.Compare(e.v, v+1) })
	if i == 0 || v > s.HeadVersion() {
		return nil, false // before the first known version
	}
	return s.schemas[i-1].sc, true
}

// noteSchema records m's schema if it differs from the last one.
func (s *State) noteSchema(m *table.Manifest) {
	if n := len(s.schemas); n == 0 || s.schemas[n-1].sc != m.Schema() {
		s.schemas = append(s.schemas, schemaFrom{m.Version(), m.Schema()})
	}
}

// NewState returns an empty state for dataset ds with its own copy of lim.
func NewState(ds string, lim Limits, older History) *State { return NewStateOf(ds, &lim, older) }

// NewStateOf is NewState with limits shared between states: lim must not
// be modified afterwards.
func NewStateOf(ds string, lim *Limits, older History) *State {
	return &State{
		Dataset: ds, validName: subject.Validate(ds) == nil, Limits: lim, Older: older,
		Decided:     newIDSet(),
		ChangeIndex: table.NewChangeIndex(nil, table.IndexLimits{MaxBytes: lim.IndexBytes}),
		conflicts:   table.NewConflictIndex(),
		BudgetShare: joinBudget(lim.Budget, ds),
	}
}

// setBase makes m (a checkpoint's manifest) the head of an empty state.
// The change index starts at m: it knows nothing older.
func (s *State) SetBase(m *table.Manifest) {
	s.Head = m
	s.ChangeIndex.Rebuild(m)
	s.schemas = []schemaFrom{{m.Version(), m.Schema()}}
}

// setHead moves head to next, the version committed by txnID (txnBytes
// long, encoded), and advances the change index with it. The old head
// joins the window of recent manifests.
func (s *State) setHead(next *table.Manifest, txnID string, txnBytes int) {
	if s.Head != nil {
		v := s.Head.Version()
		c := costed[*table.Manifest]{s.Head, ManifestCost(txnBytes)}
		s.recent.set(v, c)
		s.recentBytes += c.cost
	}
	s.Head = next
	s.noteSchema(next)
	if err := s.ChangeIndex.Advance(next, txnID); err != nil {
		s.ChangeIndex.Rebuild(next) // out of step: start again from here
	}
}

// syncIndex makes sure the change index ends at head; it always does
// unless a code path moved head without it, and then the index restarts
// from head rather than answer for another version.
func (s *State) syncIndex() {
	if s.ChangeIndex.Head() != s.Head {
		s.ChangeIndex.Rebuild(s.Head)
	}
}

// headVersion returns the head version, 0 before creation.
func (s *State) HeadVersion() uint64 {
	if s.Head == nil {
		return 0
	}
	return s.Head.Version()
}

// Manifest implements history (and table.Versions).
func (s *State) Manifest(ctx context.Context, v uint64) (*table.Manifest, error) {
	if s.Head != nil && v == s.Head.Version() {
		return s.Head, nil
	}
	if m, ok := s.recent.get(v); ok {
		return m.v, nil
	}
	if v == 0 || v > s.HeadVersion() || s.Older == nil {
		return nil, fmt.Errorf("manifest %s@%d: %w", s.Dataset, v, table.ErrVersionNotFound)
	}
	return s.Older.Manifest(ctx, v)
}

// Committed implements history.
func (s *State) Committed(ctx context.Context, v uint64) (*lancepb.Transaction, error) {
	if t, ok := s.Txns.get(v); ok {
		return s.windowed(v, t.v)
	}
	if v == 0 || v > s.HeadVersion() || s.Older == nil {
		return nil, fmt.Errorf("transaction %s@%d: %w", s.Dataset, v, table.ErrVersionNotFound)
	}
	return s.Older.Committed(ctx, v)
}

// mark is a point to roll back to.
type Mark struct {
	Head       *table.Manifest
	LastDecSeq uint64
	LastTxnSeq uint64
	journal    int
	Versions   uint64 // top of the version index
}

func (s *State) Mark() Mark {
	return Mark{Head: s.Head, LastDecSeq: s.LastDecSeq, LastTxnSeq: s.LastTxnSeq, journal: len(s.journal), Versions: s.VersionSeq.Top()}
}

// rollback forgets everything decided since m.
func (s *State) Rollback(m Mark) {
	for _, id := range s.journal[m.journal:] {
		s.Decided.remove(id)
	}
	s.truncateJournal(m.journal)
	for v := m.Versions + 1; v <= s.VersionSeq.Top(); v++ {
		s.dropManifest(v)
		s.dropTxn(v)
	}
	s.forgetConflicts(m.Versions + 1)
	if m.Head != nil {
		s.dropManifest(m.Head.Version())
	}
	s.VersionSeq.Truncate(m.Versions)
	s.ChangeIndex.Rollback(m.Head)
	s.Head, s.LastDecSeq, s.LastTxnSeq = m.Head, m.LastDecSeq, m.LastTxnSeq
	for len(s.schemas) > 0 && (m.Head == nil || s.schemas[len(s.schemas)-1].v > m.Head.Version()) {
		s.schemas = s.schemas[:len(s.schemas)-1]
	}
	// What was dropped from the window stays dropped, but never past the
	// versions that remain.
	s.manifestsDroppedTo, s.txnsDroppedTo = min(s.manifestsDroppedTo, m.Versions), min(s.txnsDroppedTo, m.Versions)
	if s.Head == nil { // an undone creation or adoption
		s.Config = nil
		s.VersionSeq = SeqIndex{}
	}
}

// commit makes the decisions since m final: recs[i] was stored at CG_DEC
// sequence seqs[i].
func (s *State) Commit(m Mark, recs []*cellguardpb.Decision, seqs []uint64) {
	s.stored(recs, seqs)
	s.truncateJournal(0)
	s.evict()
	s.evictByCost()
	s.FitBudget()
}

// commitUnder is commit while the decisions since next, a later mark,
// stay provisional (decided while the batch since m was appending, see
// pipeline.go). next is updated to roll back to the state as it is now
// committed. The window slides up to the committed head only; the budget
// is consulted once nothing is provisional (commit).
func (s *State) CommitUnder(m Mark, recs []*cellguardpb.Decision, seqs []uint64, next *Mark) {
	s.stored(recs, seqs)
	n := copy(s.journal, s.journal[next.journal:])
	s.truncateJournal(n)
	next.journal, next.LastDecSeq = 0, s.LastDecSeq
	if next.Head != nil {
		s.evictUpTo(next.Head.Version())
		s.evictByCostUpTo(next.Head.Version())
	}
}

// stored notes where recs were stored: recs[i] at CG_DEC sequence seqs[i].
func (s *State) stored(recs []*cellguardpb.Decision, seqs []uint64) {
	for i, r := range recs {
		if r.Outcome == cellguardpb.Outcome_OUTCOME_COMMITTED {
			s.VersionSeq.Set(r.Version, seqs[i])
		}
	}
	if len(seqs) > 0 {
		s.LastDecSeq = seqs[len(seqs)-1]
	}
}

// replay folds one record of the decision log into the state, as when
// catching up after a fence. Committed records are applied with the same
// function deciding uses; the result must carry the recorded version.
func (s *State) Replay(ctx context.Context, r logrec.Record) error {
	if r.Committed() {
		if err := s.Advance(ctx, r); err != nil {
			return err
		}
		s.padVersions(r.Version)
		s.VersionSeq.Push(r.Seq)
	}
	s.NoteLogged(r)
	return nil
}

// ErrReplay reports a committed record that does not replay onto the
// version before it: the record, not the reading of it, is at fault.
var ErrReplay = errors.New("committed record does not replay")

// ErrUntrustedLog reports a record of a dataset's decision log that the
// committer cannot trust: it does not parse, its versions are not
// contiguous, it does not replay, or it claims to have decided a staging
// sequence that was never staged (or a message it has no decision for).
// Deciding on top of such a record could ack a staged message without a
// decision, so the dataset stops: its worker decides nothing, acks
// nothing, and says so (DatasetStatuses, the stopped metric, an error
// log) until the process restarts. Other datasets are not affected.
var ErrUntrustedLog = errors.New("committer: decision log cannot be trusted")

// contentError reports whether err is about what a record holds (it
// does not decode, or its transaction does not apply), as opposed to a
// failure to read something.
func contentError(err error) bool {
	return errors.Is(err, logrec.ErrMalformedRecord) || errors.Is(err, table.ErrMalformed) ||
		errors.Is(err, table.ErrInvalidTransaction) || errors.Is(err, table.ErrUnsupportedOperation)
}

// noteLogged folds a log record's identity and sequences into the state.
func (s *State) NoteLogged(r logrec.Record) {
	s.noteTombstone(r)
	s.Decided.add(r.TxnID)
	s.LastDecSeq = r.Seq
	if r.TxnSeq > s.LastTxnSeq {
		s.LastTxnSeq, s.txnSeqRec = r.TxnSeq, r.Seq
	}
}

// checkDecided confirms that a staged message at or below the last
// decided staging sequence, about to be acked without a decision of its
// own, really has one: its identity is among the decided ones. If not,
// a log record claimed a staging sequence it did not decide (a forged or
// corrupt Cg-Txn-Seq), and acking would lose the message.
func (s *State) CheckDecided(in Staged) error {
	dec := table.GetDecoder()
	defer dec.Release()
	key, txn, _, _, _ := s.identify(in, dec)
	id := key.id
	if s.Decided.hasID(key) || s.Decided.Has(fallbackID(in)) || txn != nil && s.Decided.Has(txn.GetUuid()) {
		return nil
	}
	return fmt.Errorf("%w: staged message %d (identity %q) has no decision, yet log record %d says staging sequence %d is decided",
		ErrUntrustedLog, in.Seq, id, s.txnSeqRec, s.LastTxnSeq)
}

// checkStagedSeq checks the log's claim about staging against CG_TXN: no
// record can have decided a staging sequence beyond the last one the
// staging stream ever assigned (lastStaged, read after the log).
func (s *State) CheckStagedSeq(lastStaged uint64) error {
	if s.LastTxnSeq > lastStaged {
		return fmt.Errorf("%w: log record %d of %s claims staging sequence %d, beyond the last staged sequence %d",
			ErrUntrustedLog, s.txnSeqRec, s.Dataset, s.LastTxnSeq, lastStaged)
	}
	return nil
}

// advance applies a committed record to the head manifest.
func (s *State) Advance(ctx context.Context, r logrec.Record) error {
	adoption := s.Head == nil && r.Decision.GetAdoptedManifest() != nil // logrec.Replay checks it
	if want := s.HeadVersion() + 1; r.Version != want && !adoption {
		return fmt.Errorf("%w: %s: log record %d has version %d, want %d", ErrReplay, s.Dataset, r.Seq, r.Version, want)
	}
	next, txn, err := logrec.Replay(ctx, s.Head, r, s)
	if err != nil {
		if contentError(err) {
			return fmt.Errorf("%w: %s: %w", ErrReplay, s.Dataset, err)
		}
		return fmt.Errorf("replay %s: %w", s.Dataset, err)
	}
	if s.Head == nil {
		s.Config = r.Decision.GetDatasetConfig()
	}
	s.setHead(next, r.TxnID, len(r.Decision.GetTransaction()))
	s.keepTxn(r.Version, txn, nil, len(r.Decision.GetTransaction()))
	s.evict()
	s.evictByCost()
	return nil
}

// truncateJournal keeps the journal's first n uuids and clears the slots
// after them: a uuid decoded from a staged body is that body's own bytes
// (table.Decoder), and a slot left behind would keep the whole body, a
// creation's tens of KiB, alive until a later decision overwrote it.
func (s *State) truncateJournal(n int) {
	clear(s.journal[n:])
	s.journal = s.journal[:n]
}
