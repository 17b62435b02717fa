package main

import (
	"flag"
	"time"

	"cellguard/committer"
)

// memFlags are serve's flags for the committer's memory and retention
// bounds; zero values take the committer's defaults.
type memFlags struct {
	indexBytes, windowBytes, keepCheckpoints *int
	cacheBytes                               *int
	rebaseLag                                *uint64
	decisionsPerSubject                      *int64
	idleEvict                                *time.Duration
}

func memoryFlags(fs *flag.FlagSet) memFlags {
	return memFlags{
		indexBytes:          fs.Int("index-bytes", 0, "bytes of change index per dataset, for deciding stale reads without rebuilding old versions (0: 128 KiB)"),
		windowBytes:         fs.Int("window-bytes", 0, "approximate bytes of recent manifests kept per dataset (0: 96 KiB)"),
		cacheBytes:          fs.Int("cache-bytes", 0, "one memory budget for all datasets' cached manifests, transactions and change indexes; the least recently active drop theirs first (0: 32 MiB; negative: none)"),
		keepCheckpoints:     fs.Int("keep-checkpoints", 0, "checkpoints kept per dataset (0: 10)"),
		rebaseLag:           fs.Uint64("max-rebase-lag", 0, "reject transactions read more than N versions behind head with READ_VERSION_TOO_OLD once their preconditions hold (0: max(checkpoint-every, window, 1000))"),
		decisionsPerSubject: fs.Int64("decisions-per-subject", 0, "decision log records kept per dataset and outcome, never past the newest checkpoint (0: 2×max read lag; -1: all)"),
		idleEvict:           fs.Duration("idle-evict", 0, "drop an idle dataset's state from memory after this long (0: 5m; negative: never)"),
	}
}

func (m memFlags) apply(cfg *committer.Config) {
	cfg.IndexBytes, cfg.WindowBytes, cfg.KeepCheckpoints = *m.indexBytes, *m.windowBytes, *m.keepCheckpoints
	cfg.CacheBytes = *m.cacheBytes
	cfg.MaxRebaseLag, cfg.DecisionsPerSubject, cfg.IdleEvict = *m.rebaseLag, *m.decisionsPerSubject, *m.idleEvict
}
