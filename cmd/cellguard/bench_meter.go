package main

import (
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// runMeter measures what a run costs beyond its rate, from the end of its
// set-up: the groups of decisions it appends to the decision log (the
// raw loop counts its own; a committer's come from its batch-size
// histogram, one observation per group appended) and the CPU time of the
// whole process.
type runMeter struct {
	raw  appendCounts         // the raw loop's counts
	reg  *prometheus.Registry // the committer's metrics; nil for raw
	base metered              // at the end of the set-up
}

// appendCounts is what the raw loop appended.
type appendCounts struct {
	groups, decisions atomic.Int64
}

// metered is what a runMeter reads.
type metered struct {
	groups, decisions int64
	cpu               time.Duration
}

func newRunMeter(raw bool) *runMeter {
	m := &runMeter{}
	if !raw {
		m.reg = prometheus.NewRegistry()
	}
	return m
}

// batchSizeMetric is the committer's histogram of decisions per group.
const batchSizeMetric = "cellguard_committer_batch_size"

// read reads the counts once they include decided decisions: a decision
// is seen by the bench as soon as the log stores it, and counted by its
// appender only when the append's answer is back (for at most a few
// seconds: a count that never gets there is read as it is).
func (m *runMeter) read(decided int) metered {
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := m.counts()
		if r.decisions >= int64(decided) || time.Now().After(deadline) {
			r.cpu = processCPU()
			return r
		}
		time.Sleep(time.Millisecond)
	}
}

func (m *runMeter) counts() metered {
	if m.reg == nil {
		return metered{groups: m.raw.groups.Load(), decisions: m.raw.decisions.Load()}
	}
	mfs, err := m.reg.Gather()
	if err != nil {
		return metered{}
	}
	var r metered
	for _, mf := range mfs {
		if mf.GetName() != batchSizeMetric {
			continue
		}
		for _, s := range mf.GetMetric() {
			r.groups += int64(s.GetHistogram().GetSampleCount())
			r.decisions += int64(s.GetHistogram().GetSampleSum())
		}
	}
	return r
}

// mark notes the readings at the end of the set-up, which decided
// decisions.
func (m *runMeter) mark(decided int) { m.base = m.read(decided) }

// since is what the run used after the set-up, once decided decisions
// (set-up included) are appended.
func (m *runMeter) since(decided int) metered {
	now := m.read(decided)
	return metered{groups: now.groups - m.base.groups, decisions: now.decisions - m.base.decisions, cpu: now.cpu - m.base.cpu}
}

// processCPU is the CPU time (user and system, every thread) this process
// has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
