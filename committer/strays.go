package committer

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// Stray staged messages.
//
// CG_TXN accepts <prefix>.txn.* and a publisher may use a wildcard
// literally: a message stored on <prefix>.txn.* or <prefix>.txn.> names no
// dataset, and no consumer can single it out, since its filter would be a
// wildcard overlapping every dataset's consumer (a work-queue stream
// refuses that, or, created first, it would take every dataset's traffic).
// Such a token gets no worker. Instead the committer finds these "stray"
// messages by scanning the stream (direct get by sequence), rejects each
// with INVALID_DATASET_NAME on the reserved log subject.StrayDataset, and
// deletes it from CG_TXN once the rejection is in the log. Every other
// invalid token (non-ASCII, '$', too long, …) is a literal subject, gets a
// worker of its own and is rejected there.
//
// Any number of committers may sweep at once: the rejection is a fenced
// append to the reserved log, the loser re-reads it and finds the message
// decided, and deleting a deleted message is harmless.

// strayBudget bounds the direct gets of one sweep; the scan resumes where
// it stopped at the next discovery tick.
const strayBudget = 1000

// strays is the sweeper's state. It is used only by Run's goroutine.
type strays struct {
	c    *Committer
	w    *worker // the reserved log's state and fenced append; nil until first needed
	next uint64  // CG_TXN sequence the scan resumes at (0: the stream's first)
}

// sweep rejects and removes the stray messages it finds within one budget.
func (s *strays) sweep(ctx context.Context) error {
	if s.w == nil {
		w := newWorker(s.c, subject.StrayDataset)
		if err := w.load(ctx); err != nil {
			return err
		}
		s.w = w
	}
	for range strayBudget {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		m, err := s.nextMsg(ctx)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			s.next = 0 // at the end: the next sweep starts over
			return nil
		}
		if err != nil {
			return err
		}
		tok, _ := s.c.sc.ParseStaged(m.Subject)
		if subject.IsWildcardToken(tok) {
			if err := s.reject(ctx, m); err != nil {
				return err
			}
		}
		s.next = m.Sequence + 1
	}
	return nil
}

// nextMsg returns the first staged message at or after s.next.
func (s *strays) nextMsg(ctx context.Context) (*jetstream.RawStreamMsg, error) {
	ctx, cancel := context.WithTimeout(ctx, logRequestTimeout)
	defer cancel()
	return s.c.txn.GetMsg(ctx, max(s.next, 1), jetstream.WithGetMsgSubject(s.c.sc.TxnTree()))
}

// reject logs the rejection of stray message m, unless the log has it
// already, then deletes m from CG_TXN.
func (s *strays) reject(ctx context.Context, m *jetstream.RawStreamMsg) error {
	w, c := s.w, s.c
	st := w.st
	if m.Sequence > st.LastTxnSeq {
		mk := st.Mark()
		v := st.Decide(ctx, staged{Seq: m.Sequence, Data: m.Data, MsgID: m.Header.Get(subject.HdrMsgID), Header: m.Header})
		if v.Broken != nil {
			st.Rollback(mk)
			return fmt.Errorf("committer: stray message %d: %w", m.Sequence, v.Broken)
		}
		if !v.Skip {
			tok, nameErr := c.sc.ParseStaged(m.Subject)
			v.Rec.Message = fmt.Sprintf("staged on subject %q: %v; no dataset can have this name (rejections of such messages are logged under %q)", m.Subject, nameErr, subject.StrayDataset)
			actx, cancel := context.WithTimeout(ctx, appendTimeout)
			// The message was changed after decide encoded it: encode again.
			seqs, err := c.dl.Append(actx, subject.StrayDataset, mk.LastDecSeq, []*cellguardpb.Decision{v.Rec})
			cancel()
			if err != nil {
				st.Rollback(mk)
				if cerr := w.catchUp(ctx); cerr != nil {
					return cerr
				}
				return fmt.Errorf("committer: reject stray message %d: %w", m.Sequence, err)
			}
			st.Commit(mk, []*cellguardpb.Decision{v.Rec}, seqs)
			c.metrics.decisions.WithLabelValues(subject.StrayDataset, outcomeLabel(v.Rec), reasonLabel(v.Rec)).Inc()
			c.log.Warn("rejected a staged message on a wildcard subject", "subject", m.Subject, "token", tok, "seq", m.Sequence, "txn", v.Rec.TxnUuid)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, logRequestTimeout)
	defer cancel()
	if err := c.txn.DeleteMsg(dctx, m.Sequence); err != nil {
		// Already gone (a peer swept it), or lost: a decided message left
		// behind is deleted by the next sweep.
		c.log.Debug("remove decided stray message", "seq", m.Sequence, "err", err)
	}
	return nil
}
