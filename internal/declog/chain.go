package declog

import "errors"

// A replica can hand out a log with records missing: JetStream does not
// repair a replica whose block file was damaged, and it serves direct
// gets (any replica answers them) and consumers (placed on any replica)
// from what it has left, skipping the lost records. The other replicas,
// and so the stream leader while it is one of them, still hold them.
//
// A dataset's committed versions follow each other in the log: 1, 2, 3,
// … (an adopted table starts at its adopted version; retention drops the
// oldest, never one in the middle; a tombstone ends them, and the name
// stays taken). So a scan that hands out a committed record whose
// version is not the one after the previous committed record of its
// dataset has read a replica that lost records, or the log holds records
// that disagree with each other. Before handing such a record, or a
// malformed one, to its caller, a scan reads the rest of its range again
// at the stream leader (STREAM.MSG.GET, leaderRange) from the record
// after the last one it handed out, and goes on from the leader's
// records. Where the leader's records disagree too, they are handed out
// as they are: the caller's own checks then refuse them (a committer
// stops the dataset as untrusted), as before any re-read.

// chain follows the committed versions a scan hands out.
type chain struct {
	last  map[string]uint64 // the newest committed version handed out, per dataset
	after uint64            // the version before the first committed record (ScanOptions.After); 0: not known
	next  uint64            // the sequence after the last record handed out
}

func newChain(after, from uint64) *chain {
	return &chain{last: map[string]uint64{}, after: after, next: from}
}

// breaks reports whether r does not follow the records handed out
// before it: a committed record whose version is not the next one of its
// dataset.
func (c *chain) breaks(r Record) bool {
	if !r.Committed() {
		return false
	}
	prev, ok := c.last[r.Dataset]
	if !ok {
		if c.after == 0 {
			return false
		}
		prev = c.after
	}
	return r.Version != prev+1
}

// add notes r, handed out.
func (c *chain) add(r Record) {
	if r.Committed() {
		c.last[r.Dataset] = r.Version
		c.after = 0
	}
	c.next = r.Seq + 1
}

// guard wraps yield for a read from a replica: a record that breaks the
// chain, or a malformed one, is held back and *suspect set (the read
// stops there, for a re-read at the leader); every other record is noted
// and yielded.
func (c *chain) guard(yield func(Record, error) bool, suspect *bool) func(Record, error) bool {
	return func(r Record, err error) bool {
		if err == nil && c.breaks(r) || errors.Is(err, ErrMalformedRecord) {
			*suspect = true
			return false
		}
		if err == nil {
			c.add(r)
		}
		return yield(r, err)
	}
}

// pass wraps yield for a read at the leader: every record is noted and
// yielded as it is.
func (c *chain) pass(yield func(Record, error) bool) func(Record, error) bool {
	return func(r Record, err error) bool {
		if err == nil {
			c.add(r)
		} else if r.Seq > 0 {
			c.next = r.Seq + 1 // a malformed record, handed out as such
		}
		return yield(r, err)
	}
}

// reread notes a re-read at the stream leader from sequence from.
func (l *Log) reread(filter string, from uint64) {
	l.rereads.Add(1)
	if f := l.opts.Reread; f != nil {
		f(filter, from)
	}
}

// Rereads counts the scans that read again at the stream leader after a
// replica's records did not follow each other.
func (l *Log) Rereads() int64 { return l.rereads.Load() }
