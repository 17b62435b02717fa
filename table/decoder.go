package table

import (
	"context"
	"sync"

	"cellguard/internal/pbwire"
	"cellguard/proto/lancepb"
)

// Decoder decodes transactions as DecodeTransaction does, except that it
// decodes the usual Append — one fragment with one data file, and no
// precondition or one on a single fragment — into a block of its own
// that every such Decode reuses:
// the messages cost no allocation, and nothing is left for the garbage
// collector to trace and sweep. Decode reports when it did so (reused);
// such a transaction is valid only until the next Decode, and a caller
// that must keep it keeps its encoding (or proto.Clone) instead.
//
// A Decoder is not safe for concurrent use; its zero value is ready.
// GetDecoder and Release share Decoders through a pool, so that a caller
// deciding for many tables at once holds one per decode in progress, not
// one per table.
type Decoder struct {
	block guardedBlock
	// raw is the block's fragment as staged, when that is how this
	// package encodes it with id 0 (canonicalFragment); else nil. A piece
	// of the body last decoded into the block.
	raw []byte
	// body is the body last decoded by the fast path (decodeAppend), nil
	// after any other; its only read_version field (a varint, if any) is
	// body[rvStart:rvEnd] (empty if none), for Land.
	body           []byte
	rvStart, rvEnd int
}

// decoders are the Decoders not in use (GetDecoder, Release).
var decoders = sync.Pool{New: func() any { return new(Decoder) }}

// GetDecoder returns a Decoder of the pool, as its zero value.
func GetDecoder() *Decoder { return decoders.Get().(*Decoder) }

// Release gives d back to the pool, first forgetting what it decoded
// (its strings share the decoded body's bytes). Neither d nor anything
// it decoded into its block may be used afterwards.
func (d *Decoder) Release() {
	*d = Decoder{}
	decoders.Put(d)
}

// Decode decodes b as DecodeTransaction does; reused reports that txn is
// in d's block, valid until d's next Decode. Unlike DecodeTransaction's,
// the strings of an Append or Overwrite Decode decodes itself are b's own bytes, not a
// copy: the caller must never change b afterwards (the committer's staged
// bodies are messages it received and only reads). Whatever keeps such a
// string keeps b.
func (d *Decoder) Decode(b []byte) (txn *lancepb.Transaction, op Op, reused bool, err error) {
	d.body = nil
	if txn, op, reused, ok := decodeAppend(b, d); ok {
		return txn, op, reused, nil
	}
	txn, op, err = decodeGeneral(b)
	return txn, op, false, err
}

// Apply is table.Apply. When txn is the Append d last decoded into its
// block, its fragment goes into the new version as it was staged, its
// bytes with the new id in front, instead of being checked for parts it
// cannot have and encoded again. The caller must not have changed txn's
// fragment since, nor the body it was decoded from (the committer lands
// such an Append only when nothing rebased it). A nil Decoder is Apply.
func (d *Decoder) Apply(ctx context.Context, head *Manifest, txn *lancepb.Transaction, older Versions) (*Manifest, error) {
	var raw []byte
	if d != nil && txn == &d.block.txn {
		raw = d.raw
	}
	return apply(ctx, head, txn, older, raw)
}

// Land is table.Land. When b is the body d last decoded as an Append (the
// same bytes, unchanged since), where its read_version field is is known
// already: the landed transaction is b with that field cut out and the
// new one in front, measured and later written without walking b's
// fields again (TestDecoderLandMatchesLand). A nil Decoder is Land.
func (d *Decoder) Land(b []byte, rv uint64) (Landed, error) {
	if d == nil || d.body == nil || len(b) != len(d.body) || len(b) == 0 || &b[0] != &d.body[0] {
		return Land(b, rv)
	}
	cut := d.rvEnd - d.rvStart
	return Landed{staged: b, rv: rv, n: pbwire.SizeUint(readVersionField, rv) + len(b) - cut, cut: cut, cutAt: d.rvStart, known: true}, nil
}
