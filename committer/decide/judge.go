package decide

// judge.go is the decision core proper: one staged message against the
// current (provisional) state, through the rules, to a verdict.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"cellguard/evaluator"
	"cellguard/internal/logrec"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// decide decides one staged message against the current (provisional)
// state and, unless it is a skip, records the result in the state.
func (s *State) Decide(ctx context.Context, in Staged) Verdict {
	s.Deciding = true
	s.decoder = table.GetDecoder()
	defer func() {
		s.Deciding = false
		s.decoder.Release()
		s.decoder = nil
	}()
	key, txn, op, borrowed, decodeErr := s.identify(in, s.decoder) // key: looked up here, added in record
	id := key.id
	if s.Decided.hasID(key) || s.attemptDecided(in) {
		return Verdict{Skip: true}
	}
	rec := &cellguardpb.Decision{Dataset: s.Dataset, TxnUuid: id, TxnSeq: in.Seq, HeadVersion: s.HeadVersion()}
	if txn != nil {
		rec.ReadVersion = txn.GetReadVersion()
	}
	v, rej := s.judge(ctx, in, txn, op, decodeErr, rec)
	if v.Broken != nil {
		if borrowed {
			v.Txn = nil // the decoder goes back to the pool
		}
		return v
	}
	if rej != nil {
		rec.Outcome = cellguardpb.Outcome_OUTCOME_REJECTED
		rec.Reason = rej.reason
		rec.Message = stableText(rej.msg)
		rec.Violations = rej.violations
		rec.ConflictVersion, rec.ConflictTxnUuid = rej.conflictVersion, rej.conflictTxn
		if txn != nil && decodeErr == nil {
			rec.Transaction = in.Data // as staged, for whoever recomputes it
		}
		v = Verdict{Rec: rec}
	}
	if rec.ReadVersion > 0 && rec.ReadVersion <= s.HeadVersion() {
		v.Lag = s.HeadVersion() - rec.ReadVersion
	}
	v.borrowed = borrowed && v.Next != nil
	if enc, err := v.encode(); err == nil {
		v.body = enc.Body
	}
	if v.Next != nil && !v.borrowed && len(v.Rec.Transaction) >= keepEncodedMin {
		// Kept encoded, as a borrowed one is: decoded, a creation of
		// hundreds of fragments takes several times its bytes, and
		// nothing needs that decoding once its head is built.
		v.borrowed, borrowed = true, true
	}
	s.record(v, key, in.Seq)
	if borrowed {
		v.Txn = nil // the decoder goes back to the pool; rec.Transaction is its encoding
	}
	return v
}

// keepEncodedMin is the encoded size from which a committed transaction
// is kept in the window as its encoding (windowTxn), decoded again only if
// a later decision asks for it.
const keepEncodedMin = 4 << 10

// identify finds the transaction's identity: the body's uuid when it
// decodes and is a valid id, else the Nats-Msg-Id the producer set when
// that is valid, else the stream sequence (subject.AnonymousTxnID, a
// namespace no valid id can take). A body whose uuid is not a valid id is
// rejected (decodeErr) under the fallback identity, so two messages never
// share an identity by accident or by choice. The transaction is decoded
// with dec: borrowed reports that it lives in dec's memory, valid until
// dec decodes again or is released. The identity comes parsed (idOf), for
// the decided set.
func (s *State) identify(in Staged, dec *table.Decoder) (id decidedID, txn *lancepb.Transaction, op table.Op, borrowed bool, err error) {
	if len(in.Data) > s.Limits.MaxTxnBytes {
		return idOf(fallbackID(in)), nil, table.OpUnknown, false, nil
	}
	txn, op, borrowed, err = dec.Decode(in.Data)
	if txn == nil {
		return idOf(fallbackID(in)), txn, op, borrowed, err
	}
	id = idOf(txn.GetUuid())
	if idErr := validTxnID(id); idErr != nil {
		if err == nil {
			err = fmt.Errorf("transaction uuid: %w", idErr)
		}
		return idOf(fallbackID(in)), txn, op, borrowed, err
	}
	return id, txn, op, borrowed, err
}

// validTxnID is subject.ValidTxnID(x.id), answered at once for the usual
// id, a uuid in lower-case hex (36 printable characters, none of the
// reserved prefix: TestValidTxnIDMatchesSubject).
func validTxnID(x decidedID) error {
	if x.isUUID {
		return nil
	}
	return subject.ValidTxnID(x.id)
}

func fallbackID(in Staged) string {
	if subject.ValidTxnID(in.MsgID) == nil {
		return in.MsgID
	}
	return subject.AnonymousTxnID(in.Seq)
}

// judge runs the protocol's checks in order. It returns the committed
// verdict or the first rejection.
func (s *State) judge(ctx context.Context, in Staged, txn *lancepb.Transaction, op table.Op, decodeErr error, rec *cellguardpb.Decision) (Verdict, *Rejection) {
	if rej := s.deletedRejection(); rej != nil {
		return Verdict{}, rej
	}
	switch {
	case !s.validName:
		return Verdict{}, Reject(cellguardpb.Reason_INVALID_DATASET_NAME, "%v", subject.Validate(s.Dataset))
	case len(in.Data) > s.Limits.MaxTxnBytes:
		return Verdict{}, Reject(cellguardpb.Reason_TOO_LARGE, "transaction is %d bytes, the limit is %d", len(in.Data), s.Limits.MaxTxnBytes)
	case decodeErr != nil:
		return Verdict{}, Reject(cellguardpb.Reason_INVALID_TRANSACTION, "%v", decodeErr)
	}
	if rej := s.checkStager(in, rec); rej != nil {
		return Verdict{}, rej
	}
	if rej := checkReaders(s.Config, op); rej != nil {
		return Verdict{}, rej
	}
	rv := txn.GetReadVersion()
	if op == table.OpOverwrite && rv == 0 {
		return s.create(ctx, in, txn, rec)
	}
	head := s.Head
	switch {
	case head == nil:
		return Verdict{}, Reject(cellguardpb.Reason_UNKNOWN_DATASET, "dataset %q has no committed version; create it with an Overwrite at read_version 0", s.Dataset)
	case rv == 0:
		return Verdict{}, Reject(cellguardpb.Reason_INVALID_TRANSACTION, "read_version 0 is only valid for a creating Overwrite")
	case rv > head.Version():
		return Verdict{}, Reject(cellguardpb.Reason_READ_VERSION_IN_FUTURE, "read_version %d is ahead of head %d", rv, head.Version())
	case head.Version()-rv > s.Limits.MaxLag:
		return Verdict{}, Reject(cellguardpb.Reason_READ_VERSION_TOO_OLD, "read_version %d is %d versions behind head %d (limit %d)", rv, head.Version()-rv, head.Version(), s.Limits.MaxLag)
	case s.Limits.Retain > 0 && head.Version()-rv > s.Limits.Retain:
		return Verdict{}, Reject(cellguardpb.Reason_READ_VERSION_TOO_OLD, "read_version %d is older than the %d retained versions", rv, s.Limits.Retain)
	}
	pre, err := evaluator.CheckTransaction(txn, s.Limits.Rules.Limits)
	if err != nil {
		return Verdict{}, Reject(cellguardpb.Reason_INVALID_PRECONDITION, "%v", err)
	}
	s.syncIndex()
	local := pinner{s: s, rv: rv}
	p := &local
	var pin func() (*table.Manifest, error)
	if _, indexed := s.ChangeIndex.At(rv); len(pre) > 0 && !indexed {
		// The evaluator pins only what the change index does not cover,
		// and keeps pin: only then does the pinner live on the heap.
		shared := &pinner{s: s, rv: rv}
		p, pin = shared, func() (*table.Manifest, error) { return shared.pin(ctx) }
	}
	if err := s.checkReadSchema(ctx, txn, pre, p); err != nil {
		return Verdict{}, asRejection(err)
	}
	opts := s.Limits.Rules
	if s.Deletions != nil {
		opts.Deletions = s.Deletions
	}
	opts.hist = s
	opts.conflicts = s.conflicts
	if err := checkPreconditions(ctx, s.ChangeIndex, rv, pre, pin, opts); err != nil {
		if errors.Is(err, ErrBrokenState) {
			return Verdict{Broken: err}, nil
		}
		return Verdict{}, asRejection(err)
	}
	if err := s.checkRebaseLag(rv); err != nil {
		return Verdict{}, err
	}
	var rebased *lancepb.Transaction
	var dels []DeletionWrite
	cands := candidates(txn, head, opts)
	apply := ApplyTxn
	if landsAsIs(op, cands) {
		txn.ReadVersion = head.Version() // what land would do, without the read manifest
		rebased = txn
		apply = s.decoder.Apply // an Append in its block keeps its fragment's staged bytes (table.Decoder.Apply)
	} else {
		pinned, err := p.pin(ctx)
		if err != nil {
			return Verdict{}, pinRejection(rv, err)
		}
		if rebased, dels, err = land(ctx, pinned, head, txn, cands, opts); err != nil {
			return Verdict{}, asRejection(err)
		}
	}
	next, err := apply(ctx, head, rebased, s)
	if err != nil {
		return Verdict{}, asRejection(err)
	}
	var staged []byte
	if op == table.OpAppend {
		// Landing an Append changes its read version and nothing else
		// (a rebase transforms only row changes and index coverage).
		staged = in.Data
	}
	return s.finish(next, rebased, staged, dels, rec)
}

// pinner loads the manifest at a read version at most once per decision,
// and only when something needs the whole manifest: landing, or a check
// the change index cannot answer because the read version is older than
// its horizon.
type pinner struct {
	s      *State
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

func pinRejection(rv uint64, err error) *Rejection {
	if errors.Is(err, table.ErrVersionNotFound) {
		return Reject(cellguardpb.Reason_READ_VERSION_TOO_OLD, "read_version %d is no longer retained: %v", rv, err)
	}
	return Reject(cellguardpb.Reason_INTERNAL, "load read_version %d: %v", rv, err)
}

// checkReadSchema checks that the new data files of txn name fields of
// the schema at its read version (not a precondition, but it too needs the
// read version). The schema comes from the change index when it covers
// the read version; otherwise from the pinned manifest, loaded only if the
// transaction can still get anywhere: it has preconditions to evaluate, or
// its lag is within what the committer rebases.
func (s *State) checkReadSchema(ctx context.Context, txn *lancepb.Transaction, pre []evaluator.Precondition, p *pinner) error {
	var schema *table.Schema
	if w, ok := s.ChangeIndex.At(p.rv); ok {
		schema = w.Schema()
	} else if sc, ok := s.schemaAt(p.rv); ok {
		schema = sc
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
		return Reject(cellguardpb.Reason_INVALID_TRANSACTION, "%v", err)
	}
	return nil
}

// checkRebaseLag refuses to land a transaction read more than
// maxRebaseLag versions behind head: landing it would read every
// transaction committed since (conflict checks and rebase), from the log
// once they are out of the window. The rejection is retryable: re-read
// and try again.
func (s *State) checkRebaseLag(rv uint64) *Rejection {
	lag := s.HeadVersion() - rv
	if s.Limits.MaxRebaseLag > 0 && lag > s.Limits.MaxRebaseLag {
		return Reject(cellguardpb.Reason_READ_VERSION_TOO_OLD, "read_version %d is %d versions behind head %d; the committer rebases at most %d: re-read and retry", rv, lag, s.HeadVersion(), s.Limits.MaxRebaseLag)
	}
	return nil
}

func (s *State) create(ctx context.Context, in Staged, txn *lancepb.Transaction, rec *cellguardpb.Decision) (Verdict, *Rejection) {
	if s.Head != nil {
		return Verdict{}, Reject(cellguardpb.Reason_DATASET_EXISTS, "dataset %q exists at version %d", s.Dataset, s.Head.Version())
	}
	if len(txn.GetPreconditions()) > 0 {
		return Verdict{}, Reject(cellguardpb.Reason_INVALID_PRECONDITION, "preconditions are not allowed when creating a dataset")
	}
	if _, adopting := txn.GetTransactionProperties()[logrec.AdoptProperty]; adopting {
		return s.adopt(txn, rec)
	}
	cfg, rej := creationConfig(txn, s.Dataset, s.Limits.LanceRoot, s.Limits.DatasetLocation)
	if rej != nil {
		return Verdict{}, rej
	}
	empty := headerValue(in.Header, subject.HdrStorageVersion)
	if empty != "" && !logrec.ValidStorageVersion(empty) {
		return Verdict{}, Reject(cellguardpb.Reason_INVALID_TRANSACTION, "header %s %.32q is not a data storage version (2.0, 2.1, 2.2)", subject.HdrStorageVersion, empty)
	}
	next, err := logrec.CreateAs(txn, empty)
	if err != nil {
		return Verdict{}, asRejection(err)
	}
	if cfg == nil && empty != "" {
		cfg = &cellguardpb.DatasetConfig{} // replays take the version from the record
	}
	if cfg != nil {
		// The version the table has: the one the transaction names (Create
		// holds the files to it), else its files', else the stager's, else
		// the table default.
		cfg.StorageVersion = next.DataFormat().GetVersion()
	}
	rec.DatasetConfig = cfg
	// Created as staged: the committed transaction is the staged bytes.
	return s.finish(next, txn, in.Data, nil, rec)
}

// finish checks the new manifest's version and fills the committed record.
// The committed transaction is txn encoded; or, when staged is set (the
// staged bytes txn was decoded from, differing from txn only in its read
// version), those bytes with the read version set, not encoded again:
// written when the record is (verdict.encode), straight into its body.
func (s *State) finish(next *table.Manifest, txn *lancepb.Transaction, staged []byte, dels []DeletionWrite, rec *cellguardpb.Decision) (Verdict, *Rejection) {
	if want := s.HeadVersion() + 1; next.Version() != want {
		return Verdict{}, Reject(cellguardpb.Reason_INTERNAL, "apply produced version %d, want %d", next.Version(), want)
	}
	rec.Outcome = cellguardpb.Outcome_OUTCOME_COMMITTED
	rec.Version = next.Version()
	v := Verdict{Rec: rec, Next: next, Txn: txn, Deletions: dels}
	if staged != nil {
		landed, err := s.decoder.Land(staged, txn.GetReadVersion()) // the decoder knows staged: no walk
		if err != nil {
			return Verdict{}, Reject(cellguardpb.Reason_INTERNAL, "encode committed transaction: %v", err)
		}
		v.landed = landed
		return v, nil
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(txn)
	if err != nil {
		return Verdict{}, Reject(cellguardpb.Reason_INTERNAL, "encode committed transaction: %v", err)
	}
	rec.Transaction = b
	return v, nil
}

// encode encodes v's record once, as the log stores it. A record whose
// transaction is landed (finish) gets it here, written into the body.
func (v Verdict) encode() (logrec.Encoded, error) {
	if v.landed.Len() > 0 && v.Rec.Transaction == nil {
		return logrec.EncodeLanded(v.Rec, v.landed)
	}
	return logrec.Encode(v.Rec)
}

// kept returns what the window keeps of v's committed transaction (see
// keepTxn): v.txn when it is v's own; when borrowed, v.txn and its
// encoding in the record, or, if the record did not encode (its append
// will say why), a copy of v.txn.
func (v Verdict) kept() (*lancepb.Transaction, []byte) {
	switch {
	case !v.borrowed:
		return v.Txn, nil
	case v.Rec.Transaction != nil:
		return v.Txn, v.Rec.Transaction
	}
	return proto.CloneOf(v.Txn), nil
}

// asRejection turns an error from the rules into a rejection.
func asRejection(err error) *Rejection {
	var r *Rejection
	if errors.As(err, &r) {
		return r
	}
	return &Rejection{reason: errorReason(err), msg: err.Error()}
}

// record applies a verdict to the provisional state. key is the
// identity decide looked up, parsed; the record may name another
// (checkStager's VERSION_MOVED names the attempt), and the record's is
// the one decided.
func (s *State) record(v Verdict, key decidedID, txnSeq uint64) {
	if key.id != v.Rec.TxnUuid {
		key = idOf(v.Rec.TxnUuid)
	}
	s.Decided.addID(key)
	s.journal = append(s.journal, v.Rec.TxnUuid)
	if txnSeq > s.LastTxnSeq {
		s.LastTxnSeq = txnSeq
	}
	if v.Next == nil {
		return
	}
	if s.Head == nil {
		s.Config = v.Rec.GetDatasetConfig()
	}
	s.setHead(v.Next, v.Rec.TxnUuid, len(v.Rec.Transaction))
	txn, enc := v.kept()
	s.keepTxn(v.Next.Version(), txn, enc, len(v.Rec.Transaction))
	s.padVersions(v.Next.Version())
	s.VersionSeq.Push(0) // filled in by commit
}

// stableText makes an error text the same in every build. The protobuf
// library deliberately spaces its error texts with a non-breaking space in
// some builds and a plain one in others, so that nobody depends on them; a
// decision's message is recorded in the log and must not depend on which
// binary decided it.
func stableText(s string) string {
	return strings.ReplaceAll(s, "\u00a0", " ")
}
