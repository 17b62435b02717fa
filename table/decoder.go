package table

import "cellguard/proto/lancepb"

// Decoder decodes transactions as DecodeTransaction does, except that it
// decodes the usual Append — one fragment with one data file, no
// preconditions — into a block of its own that every such Decode reuses:
// the messages cost no allocation, and nothing is left for the garbage
// collector to trace and sweep. Decode reports when it did so (reused);
// such a transaction is valid only until the next Decode, and a caller
// that must keep it keeps its encoding (or proto.Clone) instead.
//
// A Decoder is not safe for concurrent use; its zero value is ready.
type Decoder struct {
	block appendBlock
}

// Decode decodes b as DecodeTransaction does; reused reports that txn is
// in d's block, valid until d's next Decode.
func (d *Decoder) Decode(b []byte) (txn *lancepb.Transaction, op Op, reused bool, err error) {
	if txn, reused, ok := decodeAppend(b, &d.block); ok {
		return txn, OpAppend, reused, nil
	}
	txn, op, err = decodeGeneral(b)
	return txn, op, false, err
}
