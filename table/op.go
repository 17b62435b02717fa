package table

import (
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"cellguard/internal/pbwire"
	"cellguard/proto/lancepb"
)

// Op is the kind of a transaction's operation.
type Op uint8

// The operations of Lance's transaction format.
const (
	OpUnknown Op = iota
	OpAppend
	OpDelete
	OpOverwrite
	OpCreateIndex
	OpRewrite
	OpMerge
	OpRestore
	OpReserveFragments
	OpUpdate
	OpProject
	OpUpdateConfig
	OpDataReplacement
	OpUpdateMemWalState
	OpClone
	OpUpdateBases
	OpDataOverlay
	OpAppendFRITransitions
)

var opNames = [...]string{
	OpUnknown:              "Unknown",
	OpAppend:               "Append",
	OpDelete:               "Delete",
	OpOverwrite:            "Overwrite",
	OpCreateIndex:          "CreateIndex",
	OpRewrite:              "Rewrite",
	OpMerge:                "Merge",
	OpRestore:              "Restore",
	OpReserveFragments:     "ReserveFragments",
	OpUpdate:               "Update",
	OpProject:              "Project",
	OpUpdateConfig:         "UpdateConfig",
	OpDataReplacement:      "DataReplacement",
	OpUpdateMemWalState:    "UpdateMemWalState",
	OpClone:                "Clone",
	OpUpdateBases:          "UpdateBases",
	OpDataOverlay:          "DataOverlay",
	OpAppendFRITransitions: "AppendFragmentReuseTransitions",
}

func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

// Supported reports whether cellguard can apply and check the operation.
// MemWAL state, fragment-reuse transitions and Clone are carried on the wire
// but not supported.
func (o Op) Supported() bool {
	switch o {
	case OpUnknown, OpUpdateMemWalState, OpAppendFRITransitions, OpClone:
		return false
	}
	return true
}

// OpOf returns the operation kind of txn. A transaction with no operation,
// or with an operation tag this build does not know, is an error wrapping
// ErrUnsupportedOperation that names the tag.
func OpOf(txn *lancepb.Transaction) (Op, error) {
	switch txn.GetOperation().(type) {
	case *lancepb.Transaction_Append_:
		return OpAppend, nil
	case *lancepb.Transaction_Delete_:
		return OpDelete, nil
	case *lancepb.Transaction_Overwrite_:
		return OpOverwrite, nil
	case *lancepb.Transaction_CreateIndex_:
		return OpCreateIndex, nil
	case *lancepb.Transaction_Rewrite_:
		return OpRewrite, nil
	case *lancepb.Transaction_Merge_:
		return OpMerge, nil
	case *lancepb.Transaction_Restore_:
		return OpRestore, nil
	case *lancepb.Transaction_ReserveFragments_:
		return OpReserveFragments, nil
	case *lancepb.Transaction_Update_:
		return OpUpdate, nil
	case *lancepb.Transaction_Project_:
		return OpProject, nil
	case *lancepb.Transaction_UpdateConfig_:
		return OpUpdateConfig, nil
	case *lancepb.Transaction_DataReplacement_:
		return OpDataReplacement, nil
	case *lancepb.Transaction_UpdateMemWalState_:
		return OpUpdateMemWalState, nil
	case *lancepb.Transaction_Clone_:
		return OpClone, nil
	case *lancepb.Transaction_UpdateBases_:
		return OpUpdateBases, nil
	case *lancepb.Transaction_DataOverlay_:
		return OpDataOverlay, nil
	case *lancepb.Transaction_AppendFriTransitions:
		return OpAppendFRITransitions, nil
	}
	if tag, ok := unknownOperationTag(txn); ok {
		return OpUnknown, errorf("decode transaction", ErrUnsupportedOperation, "unknown operation tag %d", tag)
	}
	return OpUnknown, errorf("decode transaction", ErrUnsupportedOperation, "transaction has no operation")
}

// unknownOperationTag finds an unknown field in the operation tag range
// (100 to 199) among txn's unknown fields.
func unknownOperationTag(txn *lancepb.Transaction) (protowire.Number, bool) {
	b := txn.ProtoReflect().GetUnknown()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, false
		}
		b = b[n:]
		if num >= 100 && num < 200 {
			return num, true
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return 0, false
		}
		b = b[m:]
	}
	return 0, false
}

// DecodeTransaction decodes a Lance transaction (a `.txn` file or an inline
// transaction section) and checks that its operation is one cellguard
// supports. Errors wrap ErrMalformed or ErrUnsupportedOperation.
func DecodeTransaction(b []byte) (*lancepb.Transaction, Op, error) {
	if txn, op, _, ok := decodeAppend(b, nil); ok {
		return txn, op, nil
	}
	return decodeGeneral(b)
}

// decodeGeneral is DecodeTransaction through the protobuf decoder.
func decodeGeneral(b []byte) (*lancepb.Transaction, Op, error) {
	txn := &lancepb.Transaction{}
	if err := proto.Unmarshal(b, txn); err != nil {
		return nil, OpUnknown, &Error{Op: "decode transaction", Err: ErrMalformed, Msg: err.Error()}
	}
	op, err := OpOf(txn)
	if err != nil {
		return txn, op, err
	}
	if !op.Supported() {
		return txn, op, errorf("decode transaction", ErrUnsupportedOperation, "%s is not supported", op)
	}
	return txn, op, nil
}

// WithReadVersion returns a copy of b, an encoded transaction, with its
// read_version set to rv and every other field as b has it, in b's order:
// the transaction b decodes to, with read_version rv, without decoding
// and re-encoding it. A read_version field that is not a varint (which
// decoding keeps as an unknown field) is kept too. Errors wrap
// ErrMalformed.
func WithReadVersion(b []byte, rv uint64) ([]byte, error) {
	n, err := withReadVersionSize(b, rv)
	if err != nil {
		return nil, err
	}
	return appendWithReadVersion(make([]byte, 0, n), b, rv), nil
}

// withReadVersionSize returns len(WithReadVersion(b, rv)) without
// building it, with WithReadVersion's errors.
func withReadVersionSize(b []byte, rv uint64) (int, error) {
	n := pbwire.SizeUint(readVersionField, rv)
	err := eachTxnField(b, func(num protowire.Number, typ protowire.Type, field []byte) {
		if num != readVersionField || typ != protowire.VarintType {
			n += len(field)
		}
	})
	return n, err
}

// Landed is an encoded transaction with its read version set
// (WithReadVersion), measured but not yet written: for writing it
// straight into a larger message (declog.EncodeLanded).
type Landed struct {
	staged []byte
	rv     uint64
	n      int
	// known: staged's only read_version field is staged[cutAt:cutAt+cut]
	// (Decoder.Land), and AppendTo cuts it out without a walk.
	known      bool
	cutAt, cut int
}

// Land measures WithReadVersion(b, rv), with its errors.
func Land(b []byte, rv uint64) (Landed, error) {
	n, err := withReadVersionSize(b, rv)
	if err != nil {
		return Landed{}, err
	}
	return Landed{staged: b, rv: rv, n: n}, nil
}

// Len returns the length of the landed transaction's encoding.
func (l Landed) Len() int { return l.n }

// AppendTo appends the landed transaction's encoding to dst.
func (l Landed) AppendTo(dst []byte) []byte {
	if !l.known {
		return appendWithReadVersion(dst, l.staged, l.rv)
	}
	dst = pbwire.AppendUint(dst, readVersionField, l.rv)
	dst = append(dst, l.staged[:l.cutAt]...)
	return append(dst, l.staged[l.cutAt+l.cut:]...)
}

// Bytes returns the landed transaction's encoding in a slice of its own.
func (l Landed) Bytes() []byte { return l.AppendTo(make([]byte, 0, l.n)) }

func appendWithReadVersion(dst, b []byte, rv uint64) []byte {
	dst = pbwire.AppendUint(dst, readVersionField, rv)
	_ = eachTxnField(b, func(num protowire.Number, typ protowire.Type, field []byte) {
		if num != readVersionField || typ != protowire.VarintType {
			dst = append(dst, field...)
		}
	})
	return dst
}

// readVersionField is Transaction.read_version's field number.
const readVersionField protowire.Number = 1

// eachTxnField calls fn with every field of b, an encoded message, in b's
// order: its number, wire type and bytes (tag included). Errors wrap
// ErrMalformed; fn has then seen the fields before the bad one.
func eachTxnField(b []byte, fn func(protowire.Number, protowire.Type, []byte)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return &Error{Op: "set read version", Err: ErrMalformed, Msg: protowire.ParseError(n).Error()}
		}
		m := consumeValue(num, typ, b[n:])
		if m < 0 {
			return &Error{Op: "set read version", Err: ErrMalformed, Msg: protowire.ParseError(m).Error()}
		}
		fn(num, typ, b[:n+m])
		b = b[n+m:]
	}
	return nil
}
