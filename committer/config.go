package committer

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"cellguard/internal/subject"
)

// Config configures a Committer. The zero value of every field means its
// default; Validate checks the relationships between fields.
type Config struct {
	// Prefix is the subject prefix (default "cg").
	Prefix string
	// Logger receives structured logs (default: slog.Default()).
	Logger *slog.Logger
	// Registerer receives the metrics (default: a private registry, i.e.
	// metrics are collected but not exported).
	Registerer prometheus.Registerer

	// Replicas is the replica count of the streams created at start-up
	// (default 1; 3 in a cluster).
	Replicas int
	// Storage is the storage of the streams (default file).
	Storage jetstream.StorageType
	// TxnMaxBytes bounds the undecided backlog in CG_TXN; publishers get an
	// error when it is full (default 1 GiB).
	TxnMaxBytes int64
	// StreamMaxMsgSize is CG_TXN's MaxMsgSize (default 1 MiB). Staged
	// messages larger than MaxTxnBytes but within this limit land and are
	// rejected with TOO_LARGE.
	StreamMaxMsgSize int32
	// MaxTxnBytes is the largest transaction body the committer decides
	// (default 512 KiB).
	MaxTxnBytes int
	// Duplicates is the deduplication window of both streams (default 10 min).
	Duplicates time.Duration

	// BatchSize is the most decisions appended as one atomic batch (group
	// commit; default 256, at most 1000).
	BatchSize int
	// AtomicBatchMin is the smallest group appended as one atomic batch;
	// smaller groups go as a chain of single fenced appends (1 means
	// always atomic). The default follows the decision log's stream:
	// 32 on a single-replica file stream, where the server stages each
	// atomic batch in a file store of its own and syncs it to disk, and
	// 2 on a replicated or memory stream, where an atomic batch costs
	// about what one append does (one replication round for the group)
	// and a chain would pay a round per decision.
	AtomicBatchMin int
	// MaxAckPending is each partition consumer's MaxAckPending (default
	// the larger of 2×BatchSize and 4096). The messages of a dataset
	// that cannot decide (stopped, retrying) wait among them, so it
	// bounds what such a dataset holds of its partition.
	MaxAckPending int
	// AckWait is the consumer's AckWait (default 15 s).
	AckWait time.Duration
	// HoldLimit is how long the committer keeps a delivered message it
	// holds undecided in progress at the server, so that AckWait does not
	// run out while it waits for a decider (hold.go). Past it the message
	// is redelivered after AckWait, so a stuck decider does not pin it
	// forever. Default 8×AckWait; negative: never extended.
	HoldLimit time.Duration
	// MetricsDatasets bounds the datasets exported with their own dataset
	// label (default 200; negative: no bound). The first MetricsDatasets
	// datasets this committer serves get their own series; the counters of
	// the others are summed under dataset="_other" and their gauges (head
	// version, pending) are not exported, so a fleet of 10k datasets costs
	// a bounded number of series per replica.
	MetricsDatasets int
	// PinnedTTL is how long a silent pinned committer keeps the pin
	// (default 12 s).
	PinnedTTL time.Duration
	// PullExpiry is the expiry of each pull; at most PinnedTTL/3 so an
	// idle leader keeps its pin, at least 1 s (default PinnedTTL/4, or 1 s
	// when that is shorter and PinnedTTL allows).
	PullExpiry time.Duration
	// TakeoverOnStart unpins and resets every dataset consumer when a
	// worker starts, so a restarted single committer does not wait
	// PinnedTTL for the pin of its dead predecessor. Leave it off when
	// several replicas run: it would move the pin on every deploy.
	TakeoverOnStart bool
	// TakeoverAfter is how long a committer's pin announcements may stop
	// before a standby unpins the consumers it held (fast takeover; see
	// beacon.go). Default 1.5 s; negative disables it, leaving takeover to
	// PinnedTTL.
	TakeoverAfter time.Duration
	// DiscoverEvery is how often CG_TXN is scanned for datasets with no
	// worker (default 500 ms).
	DiscoverEvery time.Duration
	// StartStuckAfter is how long setting up the streams may take before
	// /healthz reports a stuck start (default 30 s).
	StartStuckAfter time.Duration
	// Datasets are loaded when Run starts, before any message of theirs
	// arrives (default: none; every dataset is loaded on its first
	// message). The committer serves every dataset of the partitions it
	// consumes either way.
	Datasets []string
	// Deciders is how many datasets are decided at once (default
	// DefaultDeciders): a dataset slow to decide holds up one decider,
	// never its partition.
	Deciders int
	// Partitions is the partition count CG_TXN is created with (default
	// DefaultPartitions, at most MaxPartitions). A stream that exists
	// keeps its own count; `cellguard partitions set` changes it.
	Partitions int

	// Window is how many recent manifests and transactions are kept in
	// memory to pin read versions and check conflicts (default 256).
	Window int
	// WindowBytes bounds the approximate memory the window's manifests keep
	// alive, per dataset; the oldest are dropped first, their transactions
	// kept (default 96 KiB: a dozen or so versions of a table changing a
	// few fragments each). A read version whose manifest is dropped is
	// pinned from a checkpoint and the log when it must be landed.
	WindowBytes int
	// DecisionsPerSubject is the decision log's retention: the stream keeps
	// the newest DecisionsPerSubject records of each dataset's committed
	// subject and of its rejected subject, and drops older ones (the
	// stream's MaxMsgsPerSubject). The committer never lets it drop a
	// record newer than the dataset's newest checkpoint: before appending
	// a batch that would, it waits for a checkpoint of its head. It must
	// exceed MaxReadLag, so a committed transaction whose record is gone
	// is too old to commit again if it is ever re-staged, and leave room
	// for two checkpoint intervals and a batch. Default 2×MaxReadLag
	// (200,000); negative keeps everything (with checkpoints disabled it
	// must). Exactly-once per transaction id holds for ids whose decision
	// is retained or within the Duplicates window.
	DecisionsPerSubject int64
	// IdleEvict drops a dataset's in-memory state after this long without
	// a staged message; the next message reloads it from the checkpoint
	// and the log (default 5 min; negative never).
	IdleEvict time.Duration
	// KeepCheckpoints is how many checkpoints are kept per dataset; older
	// ones are deleted after each new one is written (default 10). Read
	// versions older than the oldest kept checkpoint (and out of memory)
	// are rejected READ_VERSION_TOO_OLD.
	KeepCheckpoints int
	// CheckpointEvery is K: a checkpoint is written every K versions
	// (default 1000; 0 means default, negative disables).
	CheckpointEvery int
	// RetainVersions: read versions older than head-RetainVersions are
	// rejected with READ_VERSION_TOO_OLD (default 0: every version in the log).
	RetainVersions uint64
	// MaxReadLag: read versions more than this behind head are rejected with
	// READ_VERSION_TOO_OLD before anything else is checked (default 100000).
	MaxReadLag uint64
	// MaxRebaseLag: a transaction whose preconditions hold but that read
	// more than this many versions behind head is rejected with
	// READ_VERSION_TOO_OLD (retryable: re-read and retry) instead of being
	// checked for conflicts and rebased over every version since, which
	// reads each of those transactions (from the log, outside Window).
	// Default: the largest of CheckpointEvery, Window and 1,000: landing
	// reads at most that many transactions (from memory or, once, from the
	// log into a cache) and pins from a checkpoint at most two intervals
	// back.
	// Preconditions are evaluated at any lag up to MaxReadLag through the
	// change index, whatever MaxRebaseLag is. Each dataset's conflict
	// index keeps what the last MaxRebaseLag versions touched (some 50
	// bytes per append, counted against CacheBytes), so a transaction
	// none of them conflicts with lands without reading any of them.
	MaxRebaseLag uint64
	// IndexBytes bounds each dataset's change index, which lets stale
	// reads be evaluated and blamed without rebuilding old versions
	// (default 128 KiB: about a thousand appends of history; 1,000
	// datasets hold at most 128 MiB of it). A read older than what the
	// index covers is pinned from the checkpoint before it and the log.
	IndexBytes int
	// CacheBytes is one memory budget for the caches of all datasets
	// together: recent manifests, committed transactions, change indexes
	// and history read from the log (WindowBytes and IndexBytes still cap
	// each dataset). Over budget, the least recently active datasets drop
	// their caches first; a dataset always keeps its head manifest. A read
	// version that is no longer cached is pinned from a checkpoint and the
	// log, as any older one. Default 32 MiB; negative: no shared budget.
	CacheBytes int

	// DatasetRoot, when set, is a directory holding each dataset's Lance
	// files (<root>/<dataset>/_deletions/…): deletion vectors are read from
	// there and the deletion files a rebase produces are written there.
	DatasetRoot string
	// DataPlane opens dataset locations for their deletion files; nil
	// means gocloud.dev/blob buckets (internal/dataplane.Blob). Close is
	// called when Run returns.
	DataPlane DataPlane
	// LanceRoot, when set, publishes datasets created without a location
	// of their own: their location, recorded on the creating record, is
	// <LanceRoot>/<dataset>.lance (a path or a gocloud.dev/blob URL).
	// Datasets then serve Lance 8 readers unless created otherwise.
	LanceRoot string
	// DeletionPolicy is the precondition policy for deletions:
	// "protected-rows" (default), "strict" or "ignore".
	DeletionPolicy string

	// hook, when set (tests only), is called at each protocol step; a
	// non-nil error aborts the worker on the spot, as a crash would.
	hook func(step Step, ds string) error
	// takeOverHook, when set (tests only), is called before each look
	// the fast takeover takes at silent committers' consumers.
	takeOverHook func()
	// roundHook, when set (tests only), is called as a round of appends
	// (coalesce.go) is about to be sent, with its datasets, and whether
	// they share one atomic batch.
	roundHook func(datasets []string, shared bool)
	// noSweep, when set (tests only), keeps Run from sweeping: no dataset
	// is quieted or evicted by time.
	noSweep bool
}

// Step names a point in the commit protocol, for crash injection.
type Step string

// Protocol steps, in order.
const (
	StepDecided    Step = "decided"     // batch decided in memory, nothing sent
	StepMidBatch   Step = "mid-batch"   // part of the atomic batch sent, no commit
	StepAppended   Step = "appended"    // batch committed to the log, nothing acked
	StepPartialAck Step = "partial-ack" // some staged messages acked
	StepAcked      Step = "acked"       // every staged message of the batch acked
	StepCheckpoint Step = "checkpoint"  // checkpoint about to be written
)

// DefaultPartitions is the default Config.Partitions: enough for 16
// committers to share the work and for balance within a few percent at
// up to ~4 of them, and few enough that acks stay cheap. On a work-queue
// stream every ack makes the server ask each consumer of the stream
// whether it still needs the message, so an ack costs time linear in the
// partition count (~6 µs of server CPU at 64, docs/design.md §5.2).
const DefaultPartitions = 16

// MaxPartitions is the largest partition count.
const MaxPartitions = 1024

// minRebaseLag is the smallest default MaxRebaseLag.
const minRebaseLag = 1000

// DefaultIndexBytes is the default Config.IndexBytes.
const DefaultIndexBytes = 128 << 10

// DefaultDeciders is the default Config.Deciders. A decider is held
// through its dataset's append round trip (the pipeline decides what
// arrives meanwhile), so the deciders bound the datasets whose appends
// are in flight: with many datasets, each with a message or two waiting,
// decisions per second are about deciders × group / round trip. Each
// decider in flight also holds its batch's decoded messages and new
// state until the append lands, so deciders cost memory and collector
// time as well: against 1,024, 256 decided 10,000 and 100,000 datasets
// as fast or faster next to raw JetStream with its sync interval, in up
// to a third less memory; with every write synced (a longer round trip)
// 100,000 datasets ran a quarter slower next to raw, in a fifth less
// memory, under the 2 GB that 1,024 went over (docs/benchmarks.md §15).
const DefaultDeciders = 256

// DefaultCacheBytes is the default Config.CacheBytes.
const DefaultCacheBytes = 32 << 20

// ErrInvalidConfig is wrapped by every Validate error.
var ErrInvalidConfig = errors.New("committer: invalid config")

func (c Config) withDefaults() Config {
	if c.MetricsDatasets == 0 {
		c.MetricsDatasets = 200
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.TxnMaxBytes == 0 {
		c.TxnMaxBytes = 1 << 30
	}
	if c.StreamMaxMsgSize == 0 {
		c.StreamMaxMsgSize = 1 << 20
	}
	if c.MaxTxnBytes == 0 {
		c.MaxTxnBytes = 512 << 10
	}
	if c.Duplicates == 0 {
		c.Duplicates = 10 * time.Minute
	}
	if c.BatchSize == 0 {
		c.BatchSize = 256
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = max(2*c.BatchSize, 4096)
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.Deciders == 0 {
		c.Deciders = DefaultDeciders
	}
	if c.AckWait == 0 {
		c.AckWait = 15 * time.Second
	}
	if c.HoldLimit == 0 {
		c.HoldLimit = 8 * c.AckWait
	}
	if c.PinnedTTL == 0 {
		c.PinnedTTL = 12 * time.Second
	}
	if c.PullExpiry == 0 {
		c.PullExpiry = max(c.PinnedTTL/4, min(time.Second, c.PinnedTTL/3))
	}
	if c.TakeoverAfter == 0 {
		c.TakeoverAfter = 1500 * time.Millisecond
	}
	if c.DiscoverEvery == 0 {
		c.DiscoverEvery = 500 * time.Millisecond
	}
	if c.StartStuckAfter == 0 {
		c.StartStuckAfter = 30 * time.Second
	}
	if c.Window == 0 {
		c.Window = 256
	}
	if c.CheckpointEvery == 0 {
		c.CheckpointEvery = 1000
	}
	if c.MaxReadLag == 0 {
		c.MaxReadLag = 100000
	}
	if c.MaxRebaseLag == 0 {
		c.MaxRebaseLag = uint64(max(c.CheckpointEvery, c.Window, minRebaseLag))
	}
	if c.DecisionsPerSubject == 0 {
		c.DecisionsPerSubject = 2 * int64(c.MaxReadLag)
		if c.CheckpointEvery < 0 {
			c.DecisionsPerSubject = -1
		}
	}
	if c.IdleEvict == 0 {
		c.IdleEvict = 5 * time.Minute
	}
	if c.WindowBytes == 0 {
		c.WindowBytes = 96 << 10
	}
	if c.KeepCheckpoints == 0 {
		c.KeepCheckpoints = 10
	}
	if c.IndexBytes == 0 {
		c.IndexBytes = DefaultIndexBytes
	}
	if c.CacheBytes == 0 {
		c.CacheBytes = DefaultCacheBytes
	}
	if c.DeletionPolicy == "" {
		c.DeletionPolicy = "protected-rows"
	}
	return c
}

// Validate reports the first problem with c (after defaults are applied).
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if _, err := subject.NewScheme(c.Prefix); err != nil {
		return bad("%v", err)
	}
	switch {
	case c.BatchSize < 1 || c.BatchSize > 1000:
		return bad("BatchSize %d not in 1..1000 (the server's atomic batch limit)", c.BatchSize)
	case c.AtomicBatchMin < 0:
		return bad("AtomicBatchMin %d < 0", c.AtomicBatchMin)
	case c.MaxAckPending < c.BatchSize:
		return bad("MaxAckPending %d < BatchSize %d", c.MaxAckPending, c.BatchSize)
	case c.PullExpiry*3 > c.PinnedTTL:
		return bad("PullExpiry %v > PinnedTTL/3 (%v): the pin would flap when idle", c.PullExpiry, c.PinnedTTL/3)
	case c.PullExpiry < time.Second:
		return bad("PullExpiry %v < 1s (the client's minimum)", c.PullExpiry)
	case c.TakeoverAfter > 0 && c.TakeoverAfter < 3*beaconEvery:
		return bad("TakeoverAfter %v < %v (three announcements)", c.TakeoverAfter, 3*beaconEvery)
	case c.AckWait < time.Second:
		return bad("AckWait %v < 1s", c.AckWait)
	case c.Duplicates < time.Minute:
		return bad("Duplicates %v < 1m", c.Duplicates)
	case c.MaxTxnBytes <= 0 || int64(c.MaxTxnBytes) > int64(c.StreamMaxMsgSize):
		return bad("MaxTxnBytes %d not in 1..StreamMaxMsgSize (%d)", c.MaxTxnBytes, c.StreamMaxMsgSize)
	case c.Window < 1:
		return bad("Window %d < 1", c.Window)
	case c.DecisionsPerSubject > 0 && c.CheckpointEvery < 0:
		return bad("DecisionsPerSubject %d needs checkpoints (CheckpointEvery %d)", c.DecisionsPerSubject, c.CheckpointEvery)
	case c.DecisionsPerSubject > 0 && uint64(c.DecisionsPerSubject) <= c.MaxReadLag:
		return bad("DecisionsPerSubject %d ≤ MaxReadLag %d: a re-staged transaction whose decision was dropped could commit twice", c.DecisionsPerSubject, c.MaxReadLag)
	case c.DecisionsPerSubject > 0 && c.DecisionsPerSubject < 2*int64(c.CheckpointEvery)+int64(c.BatchSize):
		return bad("DecisionsPerSubject %d < 2×CheckpointEvery + BatchSize (%d)", c.DecisionsPerSubject, 2*c.CheckpointEvery+c.BatchSize)
	case c.IndexBytes < 4096:
		return bad("IndexBytes %d < 4096", c.IndexBytes)
	case c.Deciders < 1 || c.Deciders > 4096:
		return bad("Deciders %d not in 1..4096", c.Deciders)
	case c.Partitions < 1 || c.Partitions > MaxPartitions:
		return bad("Partitions %d not in 1..%d", c.Partitions, MaxPartitions)
	case c.Replicas < 1 || c.Replicas > 5:
		return bad("Replicas %d not in 1..5", c.Replicas)
	}
	switch c.DeletionPolicy {
	case "protected-rows", "strict", "ignore":
	default:
		return bad("DeletionPolicy %q not one of protected-rows, strict, ignore", c.DeletionPolicy)
	}
	for _, ds := range c.Datasets {
		if err := subject.Validate(ds); err != nil {
			return bad("%v", err)
		}
	}
	return nil
}
