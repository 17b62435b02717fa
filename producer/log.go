package producer

// log.go reads the decision log (CG_DEC) and the checkpoint store
// (CG_CHECKPOINTS): the source of truth for every manifest.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// Record is one decision read from the log. In a headers-only read,
// Decision is nil.
type Record struct {
	Seq      uint64 // CG_DEC stream sequence
	Dataset  string
	Outcome  subject.Outcome
	TxnID    string
	Version  uint64 // committed records only
	Decision *cellguardpb.Decision
}

// ParseRecord reads a decision log message (from a consumer of the
// client's CG_DEC stream); the body is decoded unless data is nil.
func (c *Client) ParseRecord(seq uint64, subj string, h nats.Header, data []byte) (Record, error) {
	return parseRecord(c.sc, seq, subj, h, data)
}

func parseRecord(sc subject.Scheme, seq uint64, subj string, h nats.Header, data []byte) (Record, error) {
	ds, o, err := sc.ParseDec(subj)
	if err != nil {
		return Record{}, err
	}
	r := Record{Seq: seq, Dataset: ds, Outcome: o, TxnID: h.Get(subject.HdrTxnID)}
	if o == subject.Committed {
		if r.Version, err = strconv.ParseUint(h.Get(subject.HdrVersion), 10, 64); err != nil {
			return Record{}, fmt.Errorf("record %d: header %s: %w", seq, subject.HdrVersion, err)
		}
	}
	if data != nil {
		d := &cellguardpb.Decision{}
		if err := proto.Unmarshal(data, d); err != nil {
			return Record{}, fmt.Errorf("record %d: decode decision: %w", seq, err)
		}
		r.Decision = d
		if r.TxnID == "" {
			r.TxnID = d.GetTxnUuid()
		}
	}
	return r, nil
}

// Txn decodes the committed transaction a committed record carries.
func (r Record) Txn() (*lancepb.Transaction, error) {
	if r.Decision == nil {
		return nil, fmt.Errorf("record %d: no body", r.Seq)
	}
	txn := &lancepb.Transaction{}
	if err := proto.Unmarshal(r.Decision.GetTransaction(), txn); err != nil {
		return nil, fmt.Errorf("record %d: decode transaction: %w", r.Seq, err)
	}
	return txn, nil
}

// lastRecord returns the last record on filter, or ok=false.
func (c *Client) lastRecord(ctx context.Context, filter string) (Record, bool, error) {
	dec, _, err := c.streams(ctx)
	if err != nil {
		return Record{}, false, err
	}
	m, err := dec.GetLastMsgForSubject(ctx, filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("producer: last record on %s: %w", filter, err)
	}
	r, err := parseRecord(c.sc, m.Sequence, m.Subject, m.Header, m.Data)
	return r, err == nil, err
}

// record reads the record at seq, with its body.
func (c *Client) record(ctx context.Context, seq uint64) (Record, error) {
	dec, _, err := c.streams(ctx)
	if err != nil {
		return Record{}, err
	}
	m, err := dec.GetMsg(ctx, seq)
	if err != nil {
		return Record{}, fmt.Errorf("producer: record %d: %w", seq, err)
	}
	return parseRecord(c.sc, m.Sequence, m.Subject, m.Header, m.Data)
}

// Scan calls fn for each record on filter with a sequence in [start, end],
// in order, until fn returns false. headersOnly leaves Decision nil.
// Bodies are needed to rebuild manifests; headers suffice to find a
// transaction id or a version.
func (c *Client) Scan(ctx context.Context, filter string, start, end uint64, headersOnly bool, fn func(Record) bool) error {
	if start == 0 {
		start = 1
	}
	if start > end {
		return nil
	}
	cons, err := c.js.OrderedConsumer(ctx, c.sc.DecStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    start,
		HeadersOnly:    headersOnly,
	})
	if err != nil {
		return fmt.Errorf("producer: read log %s: %w", filter, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(500))
	if err != nil {
		return fmt.Errorf("producer: read log %s: %w", filter, err)
	}
	defer it.Stop()
	if info := cons.CachedInfo(); info != nil && info.NumPending == 0 {
		return nil // nothing on filter from start on
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("producer: read log %s: %w", filter, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("producer: read log %s: %w", filter, err)
		}
		seq := md.Sequence.Stream
		if seq > end {
			return nil
		}
		var data []byte
		if !headersOnly {
			data = m.Data()
			if data == nil {
				data = []byte{}
			}
		}
		r, err := parseRecord(c.sc, seq, m.Subject(), m.Headers(), data)
		if err != nil {
			return fmt.Errorf("producer: %w", err)
		}
		if !fn(r) || seq >= end || md.NumPending == 0 {
			return nil
		}
	}
}

// checkpoint returns the newest usable checkpoint of ds at or before
// version, or nil.
func (c *Client) checkpoint(ctx context.Context, ds string, version uint64) (*cellguardpb.Checkpoint, *table.Manifest, error) {
	obj, err := c.js.ObjectStore(ctx, c.sc.CheckpointBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("producer: checkpoints: %w", err)
	}
	infos, err := obj.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("producer: list checkpoints: %w", err)
	}
	var best uint64
	for _, o := range infos {
		if !strings.HasPrefix(o.Name, ds+"/") || o.Deleted {
			continue
		}
		d, v, err := subject.ParseCheckpointKey(o.Name)
		if err == nil && d == ds && v <= version && v > best {
			best = v
		}
	}
	if best == 0 {
		return nil, nil, nil
	}
	b, err := obj.GetBytes(ctx, subject.CheckpointKey(ds, best))
	if err != nil {
		return nil, nil, fmt.Errorf("producer: read checkpoint %s@%d: %w", ds, best, err)
	}
	cp := &cellguardpb.Checkpoint{}
	if err := proto.Unmarshal(b, cp); err != nil {
		return nil, nil, nil // unusable: replay from the start
	}
	pb := &lancepb.Manifest{}
	if err := proto.Unmarshal(cp.GetManifest(), pb); err != nil {
		return nil, nil, nil
	}
	m, err := table.FromProto(pb)
	if err != nil || m.Version() != best || cp.GetVersion() != best || cp.GetDataset() != ds {
		return nil, nil, nil
	}
	// The checkpoint names the log record of its version; trust it only
	// if the log agrees.
	r, err := c.record(ctx, cp.GetLastDecSeq())
	if err != nil || r.Outcome != subject.Committed || r.Dataset != ds || r.Version != best {
		return nil, nil, nil
	}
	return cp, m, nil
}

// load rebuilds the manifest of ds at version (0: the latest) from the
// newest checkpoint at or before it and the committed records after that.
// It returns the manifest and the sequence of its record.
func (c *Client) load(ctx context.Context, ds string, version uint64, older table.Versions) (*table.Manifest, uint64, error) {
	last, ok, err := c.lastRecord(ctx, c.sc.Dec(ds, subject.Committed))
	if err != nil {
		return nil, 0, err
	}
	if !ok {
		return nil, 0, fmt.Errorf("producer: %s: %w", ds, ErrDatasetNotFound)
	}
	if version == 0 {
		version = last.Version
	}
	if version > last.Version {
		return nil, 0, fmt.Errorf("producer: %s@%d (head is %d): %w", ds, version, last.Version, ErrVersionNotFound)
	}
	cp, m, err := c.checkpoint(ctx, ds, version)
	if err != nil {
		return nil, 0, err
	}
	start, seq := uint64(1), uint64(0)
	if cp != nil {
		start, seq = cp.GetLastDecSeq()+1, cp.GetLastDecSeq()
	}
	if m != nil && m.Version() == version {
		return m, seq, nil
	}
	var applyErr error
	err = c.Scan(ctx, c.sc.Dec(ds, subject.Committed), start, last.Seq, false, func(r Record) bool {
		m, applyErr = applyRecord(m, r, older)
		seq = r.Seq
		return applyErr == nil && m.Version() < version
	})
	if err == nil {
		err = applyErr
	}
	if err != nil {
		return nil, 0, err
	}
	if m == nil || m.Version() != version {
		return nil, 0, fmt.Errorf("producer: %s@%d: log replay ended early: %w", ds, version, ErrVersionNotFound)
	}
	return m, seq, nil
}

// applyRecord applies a committed record to m, the manifest of the
// version before it.
func applyRecord(m *table.Manifest, r Record, older table.Versions) (*table.Manifest, error) {
	var have uint64
	if m != nil {
		have = m.Version()
	}
	if r.Version != have+1 {
		return nil, fmt.Errorf("producer: log of %s: record %d has version %d, want %d", r.Dataset, r.Seq, r.Version, have+1)
	}
	txn, err := r.Txn()
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	next, err := table.Apply(m, txn, older)
	if err != nil {
		return nil, fmt.Errorf("producer: log of %s: apply version %d: %w", r.Dataset, r.Version, err)
	}
	if next.Version() != r.Version {
		return nil, fmt.Errorf("producer: log of %s: applying record %d made version %d, want %d", r.Dataset, r.Seq, next.Version(), r.Version)
	}
	return next, nil
}

// versionSeq finds the log sequence of the committed record of version v.
func (c *Client) versionSeq(ctx context.Context, ds string, v uint64) (uint64, error) {
	if f := c.follower(ds); f != nil {
		if seq, ok := f.seqOf(v); ok {
			return seq, nil
		}
	}
	last, ok, err := c.lastRecord(ctx, c.sc.Dec(ds, subject.Committed))
	if err != nil {
		return 0, err
	}
	if !ok || v > last.Version {
		return 0, fmt.Errorf("producer: %s@%d: %w", ds, v, ErrVersionNotFound)
	}
	if v == last.Version {
		return last.Seq, nil
	}
	start := uint64(1)
	if cp, _, err := c.checkpoint(ctx, ds, v); err == nil && cp != nil {
		if cp.GetVersion() == v {
			return cp.GetLastDecSeq(), nil
		}
		start = cp.GetLastDecSeq() + 1
	}
	var seq uint64
	err = c.Scan(ctx, c.sc.Dec(ds, subject.Committed), start, last.Seq, true, func(r Record) bool {
		if r.Version == v {
			seq = r.Seq
		}
		return r.Version < v
	})
	if err != nil {
		return 0, err
	}
	if seq == 0 {
		return 0, fmt.Errorf("producer: %s@%d: no committed record: %w", ds, v, ErrVersionNotFound)
	}
	return seq, nil
}

// follower returns the running follower of ds, if any.
func (c *Client) follower(ds string) *follower {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.followers[ds]
}
