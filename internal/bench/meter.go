package bench

import (
	"runtime/metrics"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// runMeter measures what a run costs beyond its rate, from the end of its
// set-up: the appends it makes to the decision log and the time they
// took (the raw loop counts its own; a committer's come from its
// append-time histogram, one observation per append, and its decisions
// from its batch-size histogram), and the CPU time, heap allocation and garbage
// collections of the whole process.
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
	heap              heapUse
}

func newRunMeter(raw bool) *runMeter {
	m := &runMeter{}
	if !raw {
		m.reg = prometheus.NewRegistry()
	}
	return m
}

// The committer's histograms of decisions per dataset's group and of the
// time each append took (one per append, whatever the datasets it
// carried: the count of appends).
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
			r.cpu, r.heap = processCPU(), readHeapUse()
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
				r.decisions += int64(h.GetSampleSum())
			case appendTimeMetric:
				r.groups += int64(h.GetSampleCount())
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
		appending: now.appending - m.base.appending, cpu: now.cpu - m.base.cpu, heap: now.heap.minus(m.base.heap)}
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

// heapUse is what the process has allocated on the heap and how many
// garbage collections it has finished. On two cores a collection's mark
// phase takes a good part of the CPU for tens of milliseconds, which is
// where much of a half-load run's tail comes from: bytes allocated per
// transaction say how often that happens.
type heapUse struct {
	allocBytes uint64
	cycles     uint64
}

// heapSamples names the runtime/metrics samples readHeapUse reads; both
// are cumulative, and reading them does not stop the world.
var heapSamples = []string{"/gc/heap/allocs:bytes", "/gc/cycles/total:gc-cycles"}

func readHeapUse() heapUse {
	s := make([]metrics.Sample, len(heapSamples))
	for i, name := range heapSamples {
		s[i].Name = name
	}
	metrics.Read(s)
	var h heapUse
	if s[0].Value.Kind() == metrics.KindUint64 {
		h.allocBytes = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		h.cycles = s[1].Value.Uint64()
	}
	return h
}

func (h heapUse) minus(base heapUse) heapUse {
	return heapUse{allocBytes: h.allocBytes - base.allocBytes, cycles: h.cycles - base.cycles}
}
