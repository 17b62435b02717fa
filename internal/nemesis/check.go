package nemesis

import (
	"fmt"
	"slices"
	"time"
)

// Result is what a client observed of one operation.
type Result int

const (
	// Committed: the call returned a version.
	Committed Result = iota
	// Rejected: the call returned a decision that the transaction is not
	// committed (a rejection, or proof that it never commits).
	Rejected
	// Unknown: the call ended without an outcome; the transaction may
	// still commit.
	Unknown
)

func (r Result) String() string {
	switch r {
	case Committed:
		return "committed"
	case Rejected:
		return "rejected"
	}
	return "unknown"
}

// Kind is what an operation did.
type Kind int

const (
	// Commit stages a transaction read at Read and waits for its decision.
	Commit Kind = iota
	// Read asks for the dataset's latest version (Version).
	Read
)

// Op is one operation a client invoked and what it returned.
type Op struct {
	Client  int
	Dataset string
	Kind    Kind
	Txn     string // Commit: the transaction's uuid
	Read    uint64 // Commit: the version the transaction was read at
	Result  Result // Commit
	Version uint64 // Commit: the version committed; Read: the version read
	Call    time.Time
	Return  time.Time
}

// Decided is one committed record of a dataset's log, in log order.
type Decided struct {
	Txn     string
	Version uint64
}

// Report is the checker's verdict on a run.
type Report struct {
	Acknowledged, Rejected, Unknown int // Commit ops by result
	InLog                           int // committed records
	Lost                            int // acknowledged, not committed in the log
	Duplicated                      int // a transaction committed twice
	Wrong                           int // committed at another version than acknowledged, or committed though seen rejected
	Gaps                            int // committed versions out of order or not contiguous
	Problems                        []string
}

// OK reports a run with nothing lost, duplicated, wrong or out of order.
func (r Report) OK() bool { return r.Lost+r.Duplicated+r.Wrong+r.Gaps == 0 }

func (r Report) String() string {
	return fmt.Sprintf("%d commits acknowledged, %d rejected, %d unknown; log %d commits; lost %d, duplicated %d, wrong %d, gaps %d",
		r.Acknowledged, r.Rejected, r.Unknown, r.InLog, r.Lost, r.Duplicated, r.Wrong, r.Gaps)
}

// Check compares the clients' operations with each dataset's committed
// records (logs[ds], in log order, from version 1): versions are 1..head
// in order without a gap, no transaction is committed twice, every
// transaction a client was told committed at v is committed at v, and no
// transaction a client saw rejected is committed.
func Check(ops []Op, logs map[string][]Decided) Report {
	var r Report
	problem := func(format string, args ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, args...)) }
	inLog := map[string]uint64{}
	dss := make([]string, 0, len(logs))
	for ds := range logs {
		dss = append(dss, ds)
	}
	slices.Sort(dss)
	for _, ds := range dss {
		var want uint64 = 1
		for _, d := range logs[ds] {
			r.InLog++
			if d.Version != want {
				r.Gaps++
				problem("%s: committed version %d where %d was next", ds, d.Version, want)
			}
			want = d.Version + 1
			if v, seen := inLog[d.Txn]; seen {
				r.Duplicated++
				problem("%s: transaction %s committed at %d and again at %d", ds, d.Txn, v, d.Version)
				continue
			}
			inLog[d.Txn] = d.Version
		}
	}
	for _, o := range ops {
		if o.Kind != Commit {
			continue
		}
		got, found := inLog[o.Txn]
		switch o.Result {
		case Committed:
			r.Acknowledged++
			switch {
			case !found:
				r.Lost++
				problem("transaction %s: client %d was told version %d, the log has no commit of it", o.Txn, o.Client, o.Version)
			case got != o.Version:
				r.Wrong++
				problem("transaction %s: client %d was told version %d, the log committed it at %d", o.Txn, o.Client, o.Version, got)
			}
		case Rejected:
			r.Rejected++
			if found {
				r.Wrong++
				problem("transaction %s: client %d saw it rejected, the log committed it at %d", o.Txn, o.Client, got)
			}
		default:
			r.Unknown++
		}
	}
	return r
}
