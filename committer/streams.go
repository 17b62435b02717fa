package committer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/subject"
)

// ErrStreamMismatch reports an existing stream whose configuration breaks
// an assumption the protocol relies on.
var ErrStreamMismatch = errors.New("committer: stream configuration mismatch")

// StreamConfigs returns the configurations of CG_TXN and CG_DEC that the
// committer creates (and verifies when they exist). deploy/nats holds the
// same definitions for operators who create streams themselves.
func StreamConfigs(cfg Config) (txn, dec jetstream.StreamConfig) {
	cfg = cfg.withDefaults()
	sc, _ := subject.NewScheme(cfg.Prefix)
	txn = jetstream.StreamConfig{
		Name:        sc.TxnStream(),
		Description: "cellguard staged transactions (work queue)",
		Subjects:    []string{sc.TxnAll()},
		Retention:   jetstream.WorkQueuePolicy,
		MaxBytes:    cfg.TxnMaxBytes,
		Discard:     jetstream.DiscardNew,
		MaxMsgSize:  cfg.StreamMaxMsgSize,
		Duplicates:  cfg.Duplicates,
		Storage:     cfg.Storage,
		Replicas:    cfg.Replicas,
		AllowDirect: true,
		// One durable consumer per partition (partition.go), of the
		// current partition count and of earlier ones being drained.
		MaxConsumers: -1,
	}
	src, dest := sc.TxnPartitionMapping(cfg.Partitions)
	txn.SubjectTransform = &jetstream.SubjectTransformConfig{Source: src, Destination: dest}
	dec = jetstream.StreamConfig{
		Name:               sc.DecStream(),
		Description:        "cellguard decision log (source of truth)",
		Subjects:           []string{sc.DecAll()},
		Retention:          jetstream.LimitsPolicy,
		Discard:            jetstream.DiscardNew,
		Duplicates:         cfg.Duplicates,
		Storage:            cfg.Storage,
		Replicas:           cfg.Replicas,
		AllowDirect:        true,
		AllowAtomicPublish: true,
		// The log is the source of truth: nothing may delete or purge
		// records through the API. Only the retention below drops the
		// oldest records of a subject, and the committer makes sure that
		// is never a record newer than the dataset's newest checkpoint.
		DenyDelete:        true,
		DenyPurge:         true,
		MaxMsgsPerSubject: cfg.DecisionsPerSubject,
	}
	return txn, dec
}

// ensureStreams creates CG_TXN, CG_DEC and the checkpoint object store, or
// verifies the existing ones.
func ensureStreams(ctx context.Context, js jetstream.JetStream, cfg Config) (txn, dec jetstream.Stream, obj jetstream.ObjectStore, err error) {
	txnCfg, decCfg := StreamConfigs(cfg)
	if txn, err = ensureStream(ctx, js, txnCfg); err != nil {
		return nil, nil, nil, err
	}
	if dec, err = ensureStream(ctx, js, decCfg); err != nil {
		return nil, nil, nil, err
	}
	sc, _ := subject.NewScheme(cfg.Prefix)
	obj, err = js.ObjectStore(ctx, sc.CheckpointBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obj, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      sc.CheckpointBucket(),
			Description: "cellguard manifest checkpoints",
			Storage:     cfg.Storage,
			Replicas:    txnCfg.Replicas,
		})
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("committer: checkpoint store: %w", err)
	}
	return txn, dec, obj, nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // a peer created it first
			s, err = js.Stream(ctx, want.Name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("committer: stream %s: %w", want.Name, err)
	}
	return s, verifyStream(s.CachedInfo().Config, want)
}

// verifyStream checks the properties the protocol depends on; sizes and
// replica counts are the operator's to choose.
func verifyStream(got, want jetstream.StreamConfig) error {
	var problems []string
	if got.Retention != want.Retention {
		problems = append(problems, fmt.Sprintf("retention %v, want %v", got.Retention, want.Retention))
	}
	if !slices.Equal(got.Subjects, want.Subjects) {
		problems = append(problems, fmt.Sprintf("subjects %v, want %v", got.Subjects, want.Subjects))
	}
	if want.AllowAtomicPublish && !got.AllowAtomicPublish {
		problems = append(problems, "atomic publish disabled")
	}
	if want.Retention == jetstream.LimitsPolicy && got.MaxAge != 0 {
		problems = append(problems, fmt.Sprintf("max age %v on the decision log: records would expire", got.MaxAge))
	}
	if want.Retention == jetstream.LimitsPolicy && (got.MaxMsgs > 0 || got.MaxBytes > 0) && got.Discard == jetstream.DiscardOld {
		problems = append(problems, "max msgs or bytes with discard old on the decision log: records would be dropped regardless of checkpoints")
	}
	if want.Retention == jetstream.LimitsPolicy && got.MaxMsgsPerSubject > 0 && got.MaxMsgsPerSubject < want.MaxMsgsPerSubject {
		problems = append(problems, fmt.Sprintf("max msgs per subject %d on the decision log, below the %d the committer is configured to keep", got.MaxMsgsPerSubject, want.MaxMsgsPerSubject))
	}
	if want.Retention == jetstream.WorkQueuePolicy && got.Discard != jetstream.DiscardNew {
		problems = append(problems, "discard old on the staging stream: staged transactions would be dropped")
	}
	if got.Duplicates < 10*time.Minute && want.Duplicates >= 10*time.Minute {
		problems = append(problems, fmt.Sprintf("duplicate window %v < 10m", got.Duplicates))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s: %v", ErrStreamMismatch, want.Name, problems)
	}
	return nil
}
