package declog

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// bucket returns the checkpoint store, or nil if it does not exist yet.
func (l *Log) bucket(ctx context.Context) (jetstream.ObjectStore, error) {
	l.mu.Lock()
	obj := l.obj
	l.mu.Unlock()
	if obj != nil {
		return obj, nil
	}
	rctx, cancel := l.request(ctx)
	defer cancel()
	obj, err := l.js.ObjectStore(rctx, l.sc.CheckpointBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("declog: checkpoints: %w", err)
	}
	l.mu.Lock()
	l.obj = obj
	l.mu.Unlock()
	return obj, nil
}

// CheckpointVersions lists the checkpoint versions of every dataset,
// ascending, for a reader that keeps its own index.
func (l *Log) CheckpointVersions(ctx context.Context) (map[string][]uint64, error) {
	out := map[string][]uint64{}
	obj, err := l.bucket(ctx)
	if err != nil || obj == nil {
		return out, err
	}
	names, err := l.checkpointNames(ctx, obj)
	if err != nil {
		return nil, fmt.Errorf("declog: list checkpoints: %w", err)
	}
	for _, name := range names {
		ds, v, err := subject.ParseCheckpointKey(name)
		if err != nil {
			continue
		}
		out[ds] = append(out[ds], v)
	}
	for ds := range out {
		slices.Sort(out[ds])
	}
	return out, nil
}

// Checkpoint returns the newest checkpoint of ds at or before version,
// ok=false when there is none. A newest one that fails the trust rule
// is an error wrapping ErrUntrustedCheckpoint.
func (l *Log) Checkpoint(ctx context.Context, ds string, version uint64) (Checkpoint, bool, error) {
	all, err := l.CheckpointVersions(ctx)
	if err != nil {
		return Checkpoint{}, false, err
	}
	vs := all[ds]
	i, found := slices.BinarySearch(vs, version) // vs[:i] are the versions below it
	if found {
		i++
	}
	if i == 0 {
		return Checkpoint{}, false, nil
	}
	cp, err := l.ReadCheckpoint(ctx, ds, vs[i-1])
	return cp, err == nil, err
}

// ReadCheckpoint loads the checkpoint of ds at version v under the trust
// rule: it decodes, names ds and v, its manifest is version v, and the
// log's record at its DecSeq is the committed record of ds@v. A failure
// of the rule wraps ErrUntrustedCheckpoint; a failed read does not.
func (l *Log) ReadCheckpoint(ctx context.Context, ds string, v uint64) (Checkpoint, error) {
	obj, err := l.bucket(ctx)
	if err != nil {
		return Checkpoint{}, err
	}
	if obj == nil {
		return Checkpoint{}, fmt.Errorf("declog: checkpoint %s@%d: %w", ds, v, jetstream.ErrBucketNotFound)
	}
	var b []byte
	if l.opts.FullAPI {
		b, err = l.readObject(ctx, obj, subject.CheckpointKey(ds, v))
	} else {
		b, err = obj.GetBytes(ctx, subject.CheckpointKey(ds, v))
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("declog: read checkpoint %s@%d: %w", ds, v, err)
	}
	cp, err := decodeCheckpoint(b)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("declog: checkpoint %s@%d: %w: %v", ds, v, ErrUntrustedCheckpoint, err)
	}
	if cp.Dataset != ds || cp.Version != v || cp.Manifest.Version() != v {
		return Checkpoint{}, fmt.Errorf("declog: checkpoint %s@%d: %w: holds %s@%d (manifest %d)", ds, v, ErrUntrustedCheckpoint, cp.Dataset, cp.Version, cp.Manifest.Version())
	}
	r, err := l.At(ctx, cp.DecSeq)
	if errors.Is(err, ErrMalformedRecord) || errors.Is(err, jetstream.ErrMsgNotFound) {
		return Checkpoint{}, fmt.Errorf("declog: checkpoint %s@%d: %w: %v", ds, v, ErrUntrustedCheckpoint, err)
	}
	if err != nil {
		return Checkpoint{}, err
	}
	if !r.Committed() || r.Dataset != ds || r.Version != v {
		return Checkpoint{}, fmt.Errorf("declog: checkpoint %s@%d: %w: log record %d is not its committed record", ds, v, ErrUntrustedCheckpoint, cp.DecSeq)
	}
	return cp, nil
}

func decodeCheckpoint(b []byte) (Checkpoint, error) {
	pb := &cellguardpb.Checkpoint{}
	if err := proto.Unmarshal(b, pb); err != nil {
		return Checkpoint{}, err
	}
	mpb := &lancepb.Manifest{}
	if err := proto.Unmarshal(pb.GetManifest(), mpb); err != nil {
		return Checkpoint{}, err
	}
	m, err := table.FromProto(mpb)
	if err != nil {
		return Checkpoint{}, err
	}
	if raw := pb.GetIndexSection(); raw != nil || pb.GetIndexRules() != 0 {
		s := &lancepb.IndexSection{}
		if err := proto.Unmarshal(raw, s); err != nil {
			return Checkpoint{}, err
		}
		if m, err = m.WithIndices(s, table.IndexRules(pb.GetIndexRules())); err != nil {
			return Checkpoint{}, err
		}
	}
	cp := Checkpoint{Dataset: pb.GetDataset(), Version: pb.GetVersion(), DecSeq: pb.GetLastDecSeq(), TxnSeq: pb.GetLastTxnSeq(), Manifest: m}
	if pb.GetHasLogState() {
		u := pb.GetDecidedUuids()
		if len(u)%16 != 0 {
			return Checkpoint{}, fmt.Errorf("decided uuids: %d bytes, not a multiple of 16", len(u))
		}
		ls := &LogState{IDs: pb.GetDecidedIds(), IndexFirst: pb.GetIndexFirst(), IndexSeqs: pb.GetIndexSeqs()}
		ls.UUIDs = make([][16]byte, len(u)/16)
		for i := range ls.UUIDs {
			copy(ls.UUIDs[i][:], u[16*i:])
		}
		cp.Log = ls
	}
	return cp, nil
}

// WriteCheckpoint stores the checkpoint of cp.Manifest, creating nothing:
// the bucket must exist (the committer creates it with the streams).
func (l *Log) WriteCheckpoint(ctx context.Context, cp Checkpoint) error {
	obj, err := l.bucket(ctx)
	if err != nil {
		return err
	}
	if obj == nil {
		return fmt.Errorf("declog: write checkpoint: %w", jetstream.ErrBucketNotFound)
	}
	mb, err := cp.Manifest.AppendEncoding(nil)
	if err != nil {
		return fmt.Errorf("declog: encode checkpoint: %w", err)
	}
	v := cp.Manifest.Version()
	pb := &cellguardpb.Checkpoint{Dataset: cp.Dataset, Version: v, Manifest: mb, LastDecSeq: cp.DecSeq, LastTxnSeq: cp.TxnSeq,
		IndexRules: uint32(cp.Manifest.IndexRules())}
	if s := cp.Manifest.IndexSection(); s != nil {
		if pb.IndexSection, err = (proto.MarshalOptions{Deterministic: true}).Marshal(s); err != nil {
			return fmt.Errorf("declog: encode checkpoint: %w", err)
		}
	}
	if ls := cp.Log; ls != nil {
		pb.HasLogState, pb.DecidedIds, pb.IndexFirst, pb.IndexSeqs = true, ls.IDs, ls.IndexFirst, ls.IndexSeqs
		pb.DecidedUuids = make([]byte, 0, 16*len(ls.UUIDs))
		for _, u := range ls.UUIDs {
			pb.DecidedUuids = append(pb.DecidedUuids, u[:]...)
		}
	}
	b, err := proto.Marshal(pb)
	if err != nil {
		return fmt.Errorf("declog: encode checkpoint: %w", err)
	}
	if _, err := obj.PutBytes(ctx, subject.CheckpointKey(cp.Dataset, v), b); err != nil {
		return fmt.Errorf("declog: write checkpoint %s@%d: %w", cp.Dataset, v, err)
	}
	return nil
}

// DeleteCheckpoint removes the checkpoint of ds at version v. Deleting one
// that does not exist is not an error. Checkpoints are a cache of the log:
// deleting one loses nothing, as long as a newer trusted one remains.
func (l *Log) DeleteCheckpoint(ctx context.Context, ds string, v uint64) error {
	obj, err := l.bucket(ctx)
	if err != nil || obj == nil {
		return err
	}
	err = obj.Delete(ctx, subject.CheckpointKey(ds, v))
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("declog: delete checkpoint %s@%d: %w", ds, v, err)
	}
	return nil
}
