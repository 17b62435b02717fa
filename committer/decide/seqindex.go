package decide

// seqIndex maps committed versions to the CG_DEC sequence of their
// records, for the versions the log still holds: first, first+1, …, top.
// It starts at version 1, or later once the log's retention dropped the
// oldest records. A zero sequence is a version decided but not yet in the
// log (a provisional batch).
type SeqIndex struct {
	First uint64   // version of seqs[0]; 0 until the first push
	Seqs  []uint64 // seqs[i]: sequence of version first+i
}

// top returns the highest version indexed, 0 if none.
func (x *SeqIndex) Top() uint64 {
	if len(x.Seqs) == 0 {
		return max(x.First, 1) - 1
	}
	return x.First + uint64(len(x.Seqs)) - 1
}

// start makes the index begin at version v (empty), as when the log's
// first retained committed record is v.
func (x *SeqIndex) Start(v uint64) { x.First, x.Seqs = v, nil }

// push appends the sequence of version top()+1.
func (x *SeqIndex) Push(seq uint64) {
	if x.First == 0 {
		x.First = 1
	}
	x.Seqs = append(x.Seqs, seq)
}

// at returns the sequence of version v, false if it is not indexed (or
// not yet in the log).
func (x *SeqIndex) At(v uint64) (uint64, bool) {
	if v < x.First || v > x.Top() || x.First == 0 {
		return 0, false
	}
	s := x.Seqs[v-x.First]
	return s, s != 0
}

// set records the sequence of indexed version v.
func (x *SeqIndex) Set(v, seq uint64) {
	if v >= x.First && v <= x.Top() {
		x.Seqs[v-x.First] = seq
	}
}

// truncate forgets the versions after top.
func (x *SeqIndex) Truncate(top uint64) {
	if top < x.First || x.First == 0 { // first == 0: nothing pushed yet
		x.Seqs = x.Seqs[:0]
		return
	}
	x.Seqs = x.Seqs[:top-x.First+1]
}

// trim forgets the versions before v (their records left the log).
func (x *SeqIndex) Trim(v uint64) {
	if v <= x.First || x.First == 0 {
		return
	}
	n := min(v-x.First, uint64(len(x.Seqs)))
	x.Seqs = append([]uint64(nil), x.Seqs[n:]...)
	x.First += n
}
