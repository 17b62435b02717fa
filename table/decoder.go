package table

import (
	"context"

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
type Decoder struct {
	block guardedBlock
	// raw is the block's fragment as staged, when that is how this
	// package encodes it with id 0 (canonicalFragment); else nil. A piece
	// of the body last decoded into the block.
	raw []byte
}

// Decode decodes b as DecodeTransaction does; reused reports that txn is
// in d's block, valid until d's next Decode.
func (d *Decoder) Decode(b []byte) (txn *lancepb.Transaction, op Op, reused bool, err error) {
	if txn, reused, ok := decodeAppend(b, d); ok {
		return txn, OpAppend, reused, nil
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
