package main

import (
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// runMeter measures what a run costs beyond its rate, from the end of its
// set-up: the groups of decisions it appends to the decision log and the
// time their appends took (the raw loop counts its own; a committer's
// come from its batch-size and append-time histograms, one observation
// per group appended), and the CPU time of the whole process.
type runMeter struct {
	raw  appendCounts         // the raw loop's counts
	reg  *prometheus.Registry // the committer's metrics; nil for raw
	base metered              // at the end of the set-up
}

// appendCounts is what the raw loop appended.
type appendCounts struct {
	groups, decisions atomic.Int64
	nanos             atomic.Int64 // time spent appending
}

// metered is what a runMeter reads.
type metered struct {
	groups, decisions int64
	appending         time.Duration // the groups' appends, added up
	cpu               time.Duration
}

func newRunMeter(raw bool) *runMeter {
	m := &runMeter{}
	if !raw {
		m.reg = prometheus.NewRegistry()
	}
	return m
}

// The committer's histograms of decisions per group and of the time each
// group's append took.
const (
	batchSizeMetric  = "cellguard_committer_batch_size"
	appendTimeMetric = "cellguard_committer_append_seconds"
)

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
		return metered{groups: m.raw.groups.Load(), decisions: m.raw.decisions.Load(), appending: time.Duration(m.raw.nanos.Load())}
	}
	mfs, err := m.reg.Gather()
	if err != nil {
		return metered{}
	}
	var r metered
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			switch h := s.GetHistogram(); mf.GetName() {
			case batchSizeMetric:
				r.groups += int64(h.GetSampleCount())
				r.decisions += int64(h.GetSampleSum())
			case appendTimeMetric:
				r.appending += time.Duration(h.GetSampleSum() * float64(time.Second))
			}
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
	return metered{groups: now.groups - m.base.groups, decisions: now.decisions - m.base.decisions,
		appending: now.appending - m.base.appending, cpu: now.cpu - m.base.cpu}
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
