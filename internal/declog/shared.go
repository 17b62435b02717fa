package declog

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
)

// Group is one dataset's part of a shared append: its decisions, fenced
// on the sequence of the last record on the dataset's subjects the
// writer knows (0 for none).
type Group struct {
	Dataset string
	Expect  uint64
	Encs    []Encoded
}

// AppendShared appends the groups of several datasets as one atomic
// batch: every record lands, contiguously and in the order given, or
// none does. Each group's first record carries its own dataset's fence,
// which the server checks as it would check the group appended alone, so
// a shared batch is never less safe than its groups one by one; on a
// replicated log it costs one replication round instead of one per
// group. It returns each group's record sequences.
//
// A fence that fails, or a decision already in the log, refuses the
// whole batch, and the server's answer does not say whose: the error
// wraps ErrFenced, and the caller appends the groups one by one to find
// out (each alone is fenced as before). Other errors wrap ErrAppend (the
// outcome is unknown: re-read the log).
func (l *Log) AppendShared(ctx context.Context, groups []Group) ([][]uint64, error) {
	if len(groups) == 0 {
		return nil, fmt.Errorf("declog: shared append: no groups")
	}
	var msgs []*nats.Msg
	var all []Encoded
	for _, g := range groups {
		var err error
		if msgs, err = l.fenced(msgs, g.Dataset, g.Expect, g.Encs); err != nil {
			return nil, err
		}
		all = append(all, g.Encs...)
	}
	if len(msgs) > 1 {
		atomic(msgs)
	}
	nc := l.js.Conn()
	if err := l.sendShared(nc, groups, msgs); err != nil {
		return nil, err
	}
	resp, err := nc.RequestMsgWithContext(ctx, msgs[len(msgs)-1])
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrAppend, datasetsOf(groups), err)
	}
	seqs, err := appendResult(datasetsOf(groups), resp.Data, all)
	if err != nil {
		return nil, err
	}
	out := make([][]uint64, len(groups))
	for i, g := range groups {
		out[i], seqs = seqs[:len(g.Encs)], seqs[len(g.Encs):]
	}
	return out, nil
}

// sendShared publishes every message of a shared batch but its last (the
// commit, which is a request), and passes each group's middle to the
// MidBatch hook: a crash injected there leaves the batch uncommitted.
func (l *Log) sendShared(nc *nats.Conn, groups []Group, msgs []*nats.Msg) error {
	i := 0
	for _, g := range groups {
		for j := range g.Encs {
			if i < len(msgs)-1 {
				if err := nc.PublishMsg(msgs[i]); err != nil {
					return fmt.Errorf("%w: %s: send batch member: %v", ErrAppend, g.Dataset, err)
				}
			}
			i++
			if j == len(g.Encs)/2 && l.opts.MidBatch != nil && len(msgs) > 1 {
				if err := l.opts.MidBatch(g.Dataset); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// datasetsOf names the datasets of groups, for errors.
func datasetsOf(groups []Group) string {
	names := make([]string, len(groups))
	for i, g := range groups {
		names[i] = g.Dataset
	}
	return strings.Join(names, ",")
}
