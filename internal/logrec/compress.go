package logrec

// compress.go keeps large transactions compressed in the log. A creation
// of a few hundred fragments carries tens of kilobytes of transaction,
// mostly paths and field lists that repeat; stored as they are they fill
// the log's blocks, which the stream's server reads back whole for every
// fenced append to the dataset. Zstandard at its fastest level keeps a
// tenth or less of them, for tens of microseconds per record.

import (
	"errors"
	"fmt"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/encoding/protowire"

	"cellguard/proto/cellguardpb"
)

const (
	decTransactionZstd protowire.Number = 17

	// compressMin is the smallest transaction worth compressing: below
	// it, the frame's own bytes and the time spent outweigh what is saved.
	compressMin = 1 << 10
	// maxExpanded bounds what one record's frame may expand to: the
	// largest message a NATS server can be configured to carry.
	maxExpanded = 64 << 20
)

// txnEnc and txnDec are the log's Zstandard encoder and decoder, both
// safe for concurrent use (deciders encode, readers decode, on every
// core).
var txnEnc, txnDec = newTxnCodec()

func newTxnCodec() (*zstd.Encoder, *zstd.Decoder) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithLowerEncoderMem(true))
	if err != nil {
		panic(fmt.Sprintf("logrec: zstd encoder: %v", err)) // only for invalid options
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxMemory(maxExpanded))
	if err != nil {
		panic(fmt.Sprintf("logrec: zstd decoder: %v", err))
	}
	return enc, dec
}

// compressTxn returns body, the encoding of a decision whose transaction
// is txn, with the transaction compressed (field 17 instead of field 5)
// when txn is large and compresses by at least an eighth; otherwise body
// itself.
func compressTxn(body, txn []byte) []byte {
	if len(txn) < compressMin {
		return body
	}
	z := txnEnc.EncodeAll(txn, make([]byte, 0, len(txn)/4))
	if len(z) > len(txn)-len(txn)/8 {
		return body
	}
	out := make([]byte, 0, len(body)-len(txn)+len(z)+protowire.SizeTag(decTransactionZstd)+protowire.SizeVarint(uint64(len(z))))
	for b := body; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return body // not ours to fix: the body is proto.Marshal's or encodePlain's
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return body
		}
		if num != decTransaction {
			out = append(out, b[:n+m]...)
		}
		b = b[n+m:]
	}
	out = protowire.AppendTag(out, decTransactionZstd, protowire.BytesType)
	return protowire.AppendBytes(out, z)
}

// errCompressed reports a record whose compressed transaction cannot be
// expanded.
var errCompressed = errors.New("compressed transaction")

// Expand makes a decoded record's transaction plain: a compressed
// transaction (transaction_zstd) is decompressed into Transaction, and
// the compressed bytes are dropped. A record that sets both forms, or
// whose frame does not decode, is an error.
func Expand(d *cellguardpb.Decision) error {
	z := d.GetTransactionZstd()
	if len(z) == 0 {
		return nil
	}
	if len(d.GetTransaction()) > 0 {
		return fmt.Errorf("%w: the record carries the transaction twice", errCompressed)
	}
	b, err := txnDec.DecodeAll(z, nil)
	if err != nil {
		return fmt.Errorf("%w: %v", errCompressed, err)
	}
	if len(b) == 0 {
		return fmt.Errorf("%w: expands to nothing", errCompressed)
	}
	d.Transaction, d.TransactionZstd = b, nil
	return nil
}
