package table

import (
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// Row version sequences: the RowDatasetVersionSequence messages that record,
// per physical row of a fragment with stable row ids, the version that
// created it and the version that last updated it. They are run-length
// encoded; each run's span is a U64Segment (wire format in apply_rowids.go).

// versionRun is one run of a RowDatasetVersionSequence: n consecutive rows
// that share a version.
type versionRun struct {
	n, version uint64
}

// encodeVersionRuns serializes runs as a RowDatasetVersionSequence whose
// spans are consecutive ranges of row positions, as Lance writes them.
func encodeVersionRuns(runs []versionRun) []byte {
	var b []byte
	pos := uint64(0)
	for _, r := range runs {
		var run []byte
		run = appendMessage(run, 1, appendRangeSegment(nil, pos, pos+r.n))
		run = appendVarintField(run, 2, r.version)
		b = appendMessage(b, 1, run)
		pos += r.n
	}
	return b
}

// uniformVersions is the version sequence of n rows all at version v.
func uniformVersions(n, v uint64) []byte {
	return encodeVersionRuns([]versionRun{{n: n, version: v}})
}

// runsOf run-length encodes per-row versions.
func runsOf(versions []uint64) []versionRun {
	var runs []versionRun
	for _, v := range versions {
		if len(runs) > 0 && runs[len(runs)-1].version == v {
			runs[len(runs)-1].n++
			continue
		}
		runs = append(runs, versionRun{n: 1, version: v})
	}
	return runs
}

// decodeVersionRuns decodes a RowDatasetVersionSequence. Each run covers as
// many rows as its span has values, in order (Lance's `version_at`).
func decodeVersionRuns(b []byte) ([]versionRun, string) {
	var runs []versionRun
	total := uint64(0)
	msg := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) string {
		if num != 1 {
			return ""
		}
		if typ != protowire.BytesType {
			return "version run has the wrong wire type"
		}
		var r versionRun
		if msg := eachField(v, func(n protowire.Number, t protowire.Type, fv []byte, x uint64) string {
			switch {
			case n == 1 && t == protowire.BytesType:
				seg, msg := decodeSegment(fv)
				if msg != "" {
					return msg
				}
				r.n = seg.len()
			case n == 2 && t == protowire.VarintType:
				r.version = x
			}
			return ""
		}); msg != "" {
			return msg
		}
		if r.n > maxSequenceLen || total+r.n > maxSequenceLen {
			return "version sequence is too long"
		}
		total += r.n
		runs = append(runs, r)
		return ""
	})
	return runs, msg
}

// versionIndex answers "which version is row position p at" for a run
// list (Lance's version_at) in O(log runs).
type versionIndex struct {
	ends     []uint64 // cumulative row counts
	versions []uint64
}

func indexRuns(runs []versionRun) versionIndex {
	x := versionIndex{ends: make([]uint64, len(runs)), versions: make([]uint64, len(runs))}
	total := uint64(0)
	for i, r := range runs {
		total += r.n
		x.ends[i], x.versions[i] = total, r.version
	}
	return x
}

func (x versionIndex) at(pos uint64) (uint64, bool) {
	i, _ := slices.BinarySearch(x.ends, pos+1)
	if i == len(x.ends) {
		return 0, false
	}
	return x.versions[i], true
}

// stampRuns returns the run list of n rows whose versions are those of runs
// (rows past the runs at fallback, rows beyond n dropped), except the rows
// at the offsets next yields (ascending, below n), which get version v. The
// result is run-length encoded as Lance encodes per-row versions. It costs
// O(runs + offsets), whatever n is.
func stampRuns(runs []versionRun, n uint64, next func() (uint64, bool), v, fallback uint64) []versionRun {
	var out []versionRun
	emit := func(count, version uint64) {
		if count == 0 {
			return
		}
		if k := len(out); k > 0 && out[k-1].version == version {
			out[k-1].n += count
			return
		}
		out = append(out, versionRun{n: count, version: version})
	}
	o, more := next()
	pos := uint64(0)
	fill := func(count, version uint64) {
		end := pos + count
		for more && o < end {
			emit(o-pos, version)
			emit(1, v)
			pos = o + 1
			o, more = next()
		}
		emit(end-pos, version)
		pos = end
	}
	for _, r := range runs {
		if pos >= n {
			break
		}
		fill(min(r.n, n-pos), r.version)
	}
	fill(n-pos, fallback)
	return out
}
