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
	rawGroups atomic.Int64         // the raw loop's count
	reg       *prometheus.Registry // the committer's metrics; nil for raw
	base      metered              // at the end of the set-up
}

// metered is what a runMeter reads.
type metered struct {
	groups int64
	cpu    time.Duration
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

func (m *runMeter) read() metered {
	return metered{groups: m.groups(), cpu: processCPU()}
}

func (m *runMeter) groups() int64 {
	if m.reg == nil {
		return m.rawGroups.Load()
	}
	mfs, err := m.reg.Gather()
	if err != nil {
		return 0
	}
	var n int64
	for _, mf := range mfs {
		if mf.GetName() != batchSizeMetric {
			continue
		}
		for _, s := range mf.GetMetric() {
			n += int64(s.GetHistogram().GetSampleCount())
		}
	}
	return n
}

// mark notes the readings at the end of the set-up.
func (m *runMeter) mark() { m.base = m.read() }

// since is what the run used after the set-up.
func (m *runMeter) since() metered {
	now := m.read()
	return metered{groups: now.groups - m.base.groups, cpu: now.cpu - m.base.cpu}
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
