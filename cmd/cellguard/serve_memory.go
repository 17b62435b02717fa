package main

import (
	"flag"
	"fmt"
	"math"
	"runtime/debug"
	"strconv"
	"strings"
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
	memoryLimit                              *string
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
		memoryLimit:         memoryLimitFlag(fs),
	}
}

func (m memFlags) apply(cfg *committer.Config) {
	cfg.IndexBytes, cfg.WindowBytes, cfg.KeepCheckpoints = *m.indexBytes, *m.windowBytes, *m.keepCheckpoints
	cfg.CacheBytes = *m.cacheBytes
	cfg.MaxRebaseLag, cfg.DecisionsPerSubject, cfg.IdleEvict = *m.rebaseLag, *m.decisionsPerSubject, *m.idleEvict
}

func memoryLimitFlag(fs *flag.FlagSet) *string {
	return fs.String("memory-limit", "", "soft limit on the process's Go memory, e.g. 768MiB (B, KiB, MiB or GiB; empty: GOMEMLIMIT's, or none); "+
		"the collector runs more often near it instead of letting the heap double; set it well above the live heap")
}

// setMemoryLimit applies a --memory-limit value as the runtime's soft
// memory limit and returns a function that restores the previous one. An
// empty value leaves the limit as it is (GOMEMLIMIT, or none). GOGC stays
// as it is: the limit only makes the collector work harder as the heap
// nears it, and a limit close to the live heap makes the process do little
// but collect garbage.
func setMemoryLimit(value string) (restore func(), err error) {
	if value == "" {
		return func() {}, nil
	}
	n, err := parseBytes(value)
	if err != nil {
		return nil, usageError{fmt.Sprintf("--memory-limit: %v", err)}
	}
	prev := debug.SetMemoryLimit(n)
	return func() { debug.SetMemoryLimit(prev) }, nil
}

// parseBytes reads a byte count with an optional B, KiB, MiB or GiB suffix,
// as GOMEMLIMIT does.
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		shift  uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	num, shift := strings.TrimSpace(s), uint(0)
	for _, u := range units {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, shift = strings.TrimSpace(rest), u.shift
			break
		}
	}
	v, err := strconv.ParseUint(num, 10, 63)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("%q is not a positive byte count (e.g. 768MiB)", s)
	}
	if v > math.MaxInt64>>shift {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(v << shift), nil
}
