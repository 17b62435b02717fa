package declog

// Reading the checkpoint bucket without nats.go's object reads.
//
// nats.go (v1.55) reads an object's chunks, and lists a bucket, through
// an ordered push consumer. On a cluster its first deliveries can be lost
// while the new consumer's interest reaches the server that sends them;
// the consumer notices only when two idle heartbeats (5 s apart) are
// missed, and starts over: a read or a list then takes about ten seconds.
// A committer that takes a dataset over loads its state from the newest
// checkpoint, so the dataset stalled that long (seen on a 3-node cluster
// when a committer joined: TestJoinLoadsCheckpointsPromptly). Here an
// object's chunks are read one by one with message gets (the next message
// on the object's chunk subject), and a bucket is listed with a pull
// consumer fetched to its end: each request is answered or fails on its
// own, within the caller's request timeout. The committer reads them so
// (Options.FullAPI); the SDKs and the CLI, whose users may not send
// those requests, use nats.go's reads.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// objStream returns the stream behind the checkpoint bucket.
func (l *Log) objStream(ctx context.Context) (jetstream.Stream, error) {
	l.mu.Lock()
	s := l.objStr
	l.mu.Unlock()
	if s != nil {
		return s, nil
	}
	rctx, cancel := l.request(ctx)
	defer cancel()
	s, err := l.js.Stream(rctx, "OBJ_"+l.sc.CheckpointBucket())
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.objStr = s
	l.mu.Unlock()
	return s, nil
}

// readObject returns the bytes of object name of the checkpoint bucket
// obj, checked against the size and SHA-256 digest its metadata records.
func (l *Log) readObject(ctx context.Context, obj jetstream.ObjectStore, name string) ([]byte, error) {
	rctx, cancel := l.request(ctx)
	info, err := obj.GetInfo(rctx, name)
	cancel()
	if err != nil {
		return nil, err
	}
	if info.Size == 0 {
		return []byte{}, nil
	}
	s, err := l.objStream(ctx)
	if err != nil {
		return nil, err
	}
	subj := fmt.Sprintf("$O.%s.C.%s", l.sc.CheckpointBucket(), info.NUID)
	buf := make([]byte, 0, info.Size)
	for seq, n := uint64(1), uint32(0); n < info.Chunks; n++ {
		rctx, cancel := l.request(ctx)
		m, err := s.GetMsg(rctx, seq, jetstream.WithGetMsgSubject(subj))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("chunk %d of %d: %w", n+1, info.Chunks, err)
		}
		buf = append(buf, m.Data...)
		seq = m.Sequence + 1
	}
	if uint64(len(buf)) != info.Size {
		return nil, fmt.Errorf("%d bytes in %d chunks, the object has %d", len(buf), info.Chunks, info.Size)
	}
	want, err := jetstream.DecodeObjectDigest(info.Digest)
	if err != nil {
		return nil, fmt.Errorf("digest %q: %w", info.Digest, err)
	}
	if sum := sha256.Sum256(buf); !bytes.Equal(sum[:], want) {
		return nil, fmt.Errorf("%w: digest mismatch", jetstream.ErrDigestMismatch)
	}
	return buf, nil
}

// checkpointNames returns the names of the checkpoint bucket obj's
// objects that are not deleted: listObjects with FullAPI, else
// nats.go's list.
func (l *Log) checkpointNames(ctx context.Context, obj jetstream.ObjectStore) ([]string, error) {
	if l.opts.FullAPI {
		return l.listObjects(ctx)
	}
	infos, err := obj.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(infos))
	for _, o := range infos {
		if !o.Deleted {
			names = append(names, o.Name)
		}
	}
	return names, nil
}

// listObjects returns the names of the checkpoint bucket's objects that
// are not deleted (the last metadata message of each).
func (l *Log) listObjects(ctx context.Context) ([]string, error) {
	rctx, cancel := l.request(ctx)
	defer cancel()
	cons, err := l.js.OrderedConsumer(rctx, "OBJ_"+l.sc.CheckpointBucket(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{fmt.Sprintf("$O.%s.M.>", l.sc.CheckpointBucket())},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return nil, err
	}
	if cons.CachedInfo().NumPending == 0 {
		return nil, nil
	}
	var names []string
	var mdErr error
	err = fetchOrdered(ctx, cons, 1024, func(m jetstream.Msg) bool {
		var info jetstream.ObjectInfo
		if err := json.Unmarshal(m.Data(), &info); err == nil && !info.Deleted {
			names = append(names, info.Name)
		}
		md, err := m.Metadata()
		if err != nil {
			mdErr = err
			return false
		}
		return md.NumPending > 0
	})
	if err == nil {
		err = mdErr
	}
	if err != nil {
		return nil, err
	}
	return names, nil
}
