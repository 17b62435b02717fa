package decide

// seqIndex maps committed versions to the CG_DEC sequence of their
// records, for the versions the log still holds: first, first+1, …, top.
// It starts at version 1, or later once the log's retention dropped the
// oldest records. A zero sequence is a version decided but not yet in the
// log (a provisional batch).
type seqIndex struct {
	first uint64   // version of seqs[0]; 0 until the first push
	seqs  []uint64 // seqs[i]: sequence of version first+i
}

// top returns the highest version indexed, 0 if none.
func (x *seqIndex) top() uint64 {
	if len(x.seqs) == 0 {
		return max(x.first, 1) - 1
	}
	return x.first + uint64(len(x.seqs)) - 1
}

// start makes the index begin at version v (empty), as when the log's
// first retained committed record is v.
func (x *seqIndex) start(v uint64) { x.first, x.seqs = v, nil }

// push appends the sequence of version top()+1.
func (x *seqIndex) push(seq uint64) {
	if x.first == 0 {
		x.first = 1
	}
	x.seqs = append(x.seqs, seq)
}

// at returns the sequence of version v, false if it is not indexed (or
// not yet in the log).
func (x *seqIndex) at(v uint64) (uint64, bool) {
	if v < x.first || v > x.top() || x.first == 0 {
		return 0, false
	}
	s := x.seqs[v-x.first]
	return s, s != 0
}

// set records the sequence of indexed version v.
func (x *seqIndex) set(v, seq uint64) {
	if v >= x.first && v <= x.top() {
		x.seqs[v-x.first] = seq
	}
}

// truncate forgets the versions after top.
func (x *seqIndex) truncate(top uint64) {
	if top < x.first || x.first == 0 { // first == 0: nothing pushed yet
		x.seqs = x.seqs[:0]
		return
	}
	x.seqs = x.seqs[:top-x.first+1]
}

// trim forgets the versions before v (their records left the log).
func (x *seqIndex) trim(v uint64) {
	if v <= x.first || x.first == 0 {
		return
	}
	n := min(v-x.first, uint64(len(x.seqs)))
	x.seqs = append([]uint64(nil), x.seqs[n:]...)
	x.first += n
}
