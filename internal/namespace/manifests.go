package namespace

import (
	"context"

	"cellguard/internal/declog"
	"cellguard/internal/subject"
	"cellguard/table"
)

// recentVersions bounds the manifests a table keeps (recentManifests).
// Manifests are immutable and share unchanged fragments, so a window
// costs little more than its newest version.
const recentVersions = 64

// logManifest is a committed version's manifest, rebuilt from the log,
// and the sequence of its committed record.
type logManifest struct {
	m   *table.Manifest
	seq uint64
}

// recentManifests are the manifests of a table's newest committed
// versions this server has seen, oldest first and contiguous. The log is
// append-only and a committed version never changes, so an entry never
// goes stale: the window is only extended, by replaying the committed
// records after its newest entry, as declog.Log.Load replays them after
// a checkpoint. Only the holder of the table's commit lock uses it.
type recentManifests struct {
	vs   []logManifest
	next *declog.Record // the committed record after vs's newest, not replayed yet
}

// at returns the manifest of version v and its record's sequence, if
// held.
func (r *recentManifests) at(v uint64) (logManifest, bool) {
	if len(r.vs) == 0 {
		return logManifest{}, false
	}
	first := r.vs[0].m.Version()
	if v < first || v > r.vs[len(r.vs)-1].m.Version() {
		return logManifest{}, false
	}
	return r.vs[v-first], true
}

func (r *recentManifests) add(lm logManifest) {
	if n := len(r.vs); n > 0 && r.vs[n-1].m.Version()+1 != lm.m.Version() {
		r.vs = r.vs[:0] // not contiguous: start again from this one
	}
	r.next = nil
	r.vs = append(r.vs, lm)
	if len(r.vs) > recentVersions {
		r.vs = append(r.vs[:0], r.vs[len(r.vs)-recentVersions:]...)
	}
}

// manifestAt returns the manifest of committed version v of ds, whose
// committed head is h, and the sequence of its record: from the table's
// recent manifests, extended up to h by replaying the log, or else
// rebuilt with declog.Log.Load. The caller holds the table's commit
// lock.
func (s *Server) manifestAt(ctx context.Context, t *tableState, ds string, v uint64, h declog.Record) (*table.Manifest, uint64, error) {
	r := &t.recent
	l := s.cfg.Log
	if n := len(r.vs); r.next != nil && n > 0 && v > r.vs[n-1].m.Version() {
		rec := *r.next
		r.next = nil
		if rec.Seq <= h.Seq {
			m, _, err := declog.Replay(ctx, r.vs[n-1].m, rec, l.Versions(ds))
			if err != nil {
				return nil, 0, err
			}
			r.add(logManifest{m: m, seq: rec.Seq})
		}
	}
	if lm, ok := r.at(v); ok {
		return lm.m, lm.seq, nil
	}
	if n := len(r.vs); n > 0 && v > r.vs[n-1].m.Version() && v <= h.Version && h.Version-r.vs[n-1].m.Version() <= recentVersions {
		newest := r.vs[n-1]
		m := newest.m
		for rec, err := range l.Scan(ctx, s.sc.Dec(ds, subject.Committed), newest.seq+1, declog.ScanOptions{To: h.Seq, After: m.Version()}) {
			if err != nil {
				return nil, 0, err
			}
			if m, _, err = declog.Replay(ctx, m, rec, l.Versions(ds)); err != nil {
				return nil, 0, err
			}
			r.add(logManifest{m: m, seq: rec.Seq})
			if m.Version() >= h.Version {
				break
			}
		}
		if lm, ok := r.at(v); ok {
			return lm.m, lm.seq, nil
		}
	}
	m, seq, err := l.Load(ctx, ds, v, l.Versions(ds))
	if err != nil {
		return nil, 0, err
	}
	if v == h.Version {
		r.add(logManifest{m: m, seq: seq})
	}
	return m, seq, nil
}

// committed hands the committed record of the table's next version to
// its recent manifests, replayed when next needed (no read of the log).
// The caller holds the table's commit lock.
func (t *tableState) committed(rec declog.Record) {
	r := &t.recent
	if n := len(r.vs); n > 0 && rec.Committed() && rec.Version == r.vs[n-1].m.Version()+1 && rec.Seq > r.vs[n-1].seq {
		r.next = &rec
	}
}
