package evaluator

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// Precondition declares the cells Fields × Rows unchanged since the
// transaction's read version (Lance's CellsUnchanged). Fields are schema
// field ids; a field with nested children protects them too.
//
// Treat a Precondition as immutable once it is passed to this package.
type Precondition struct {
	Fields []int32
	Rows   RowSelection
}

// CellsUnchanged returns the precondition fields × rows.
func CellsUnchanged(rows RowSelection, fields ...int32) Precondition {
	return Precondition{Fields: fields, Rows: rows}
}

// Proto returns the wire form, with the rows in the structured form.
func (p Precondition) Proto() *lancepb.Precondition {
	return &lancepb.Precondition{Kind: &lancepb.Precondition_CellsUnchanged{
		CellsUnchanged: &lancepb.CellsUnchanged{FieldIds: p.Fields, Rows: p.Rows.Proto()},
	}}
}

// Protos returns the wire form of a list of preconditions.
func Protos(pre []Precondition) []*lancepb.Precondition {
	out := make([]*lancepb.Precondition, len(pre))
	for i, p := range pre {
		out[i] = p.Proto()
	}
	return out
}

// Limits bound the preconditions a transaction may carry, so that decoding
// and evaluating untrusted input takes bounded memory and time. A zero field
// takes its default (see DefaultLimits).
type Limits struct {
	MaxPreconditions  int // preconditions per transaction
	MaxFields         int // field ids per precondition
	MaxFragments      int // fragments per precondition's selection
	MaxCellGroups     int // Σ over preconditions of fields × fragments: bounds evaluation work
	MaxSelectionBytes int // encoded bitmap bytes per precondition
}

// DefaultLimits returns the limits used for zero fields of a Limits: 256
// preconditions, 1024 fields each, 65536 fragments each, 2^20 field ×
// fragment pairs in all, and 64 MiB of bitmaps per precondition.
func DefaultLimits() Limits {
	return Limits{
		MaxPreconditions:  256,
		MaxFields:         1024,
		MaxFragments:      65536,
		MaxCellGroups:     1 << 20,
		MaxSelectionBytes: 64 << 20,
	}
}

var defaultLimits = Limits{}.withDefaults()

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxPreconditions, d.MaxPreconditions)
	def(&l.MaxFields, d.MaxFields)
	def(&l.MaxFragments, d.MaxFragments)
	def(&l.MaxCellGroups, d.MaxCellGroups)
	def(&l.MaxSelectionBytes, d.MaxSelectionBytes)
	return l
}

// ErrInvalidPrecondition matches every *InvalidError: a precondition that is
// malformed, names cells that did not exist at the read version, exceeds a
// limit, or sits on an operation that cannot carry preconditions. Such a
// transaction is rejected for good; retrying it cannot help.
var ErrInvalidPrecondition = errors.New("invalid precondition")

// ErrMalformedManifest reports a manifest Evaluate cannot read, such as an
// overlay coverage bitmap that does not decode.
var ErrMalformedManifest = errors.New("malformed manifest")

// InvalidReason says why a precondition is invalid.
type InvalidReason uint8

// Reasons a precondition is invalid.
const (
	_                      InvalidReason = iota
	InvalidKind                          // unknown precondition kind (or unknown field in Precondition)
	InvalidEncoding                      // malformed bitmap or selection, both row forms set, duplicate fragment, unknown field
	InvalidEmptyFields                   // no field ids
	InvalidNegativeField                 // a negative field id
	InvalidUnknownField                  // a field not in the schema at the read version
	InvalidEmptySelection                // no rows, or an empty bitmap
	InvalidUnknownFragment               // a fragment not in the manifest at the read version
	InvalidOffset                        // an offset ≥ the fragment's physical rows
	InvalidOperation                     // preconditions on Overwrite, Restore, Clone, creation, a detached or unsupported commit
	InvalidLimit                         // a Limits bound exceeded
)

var invalidReasonNames = [...]string{
	InvalidKind:            "UnknownKind",
	InvalidEncoding:        "MalformedEncoding",
	InvalidEmptyFields:     "EmptyFields",
	InvalidNegativeField:   "NegativeField",
	InvalidUnknownField:    "UnknownField",
	InvalidEmptySelection:  "EmptySelection",
	InvalidUnknownFragment: "UnknownFragment",
	InvalidOffset:          "OffsetOutOfRange",
	InvalidOperation:       "UnsupportedOperation",
	InvalidLimit:           "LimitExceeded",
}

func (r InvalidReason) String() string {
	if int(r) < len(invalidReasonNames) && invalidReasonNames[r] != "" {
		return invalidReasonNames[r]
	}
	return "InvalidReason(" + strconv.Itoa(int(r)) + ")"
}

// InvalidError describes an invalid precondition. errors.Is(err,
// ErrInvalidPrecondition) holds for every *InvalidError.
type InvalidError struct {
	Precondition int // index in the transaction's list; -1 for the transaction as a whole
	Reason       InvalidReason
	Msg          string
}

func (e *InvalidError) Error() string {
	where := "transaction"
	if e.Precondition >= 0 {
		where = "precondition " + strconv.Itoa(e.Precondition)
	}
	return "evaluator: invalid precondition: " + where + ": " + e.Reason.String() + ": " + e.Msg
}

// Is reports whether target is ErrInvalidPrecondition.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalidPrecondition }

func invalidf(i int, r InvalidReason, format string, args ...any) *InvalidError {
	return &InvalidError{Precondition: i, Reason: r, Msg: fmt.Sprintf(format, args...)}
}

// at sets the precondition index and returns e as an error.
func (e *InvalidError) at(i int) error {
	e.Precondition = i
	return e
}

// unknownField returns the number of the first unknown field in raw (a
// message's unknown bytes), if there is one.
func unknownField(raw []byte) (uint64, bool) {
	if len(raw) == 0 {
		return 0, false
	}
	tag, n := binary.Uvarint(raw)
	if n <= 0 {
		return 0, true
	}
	return tag >> 3, true
}

// Decode parses a transaction's preconditions and checks everything that
// does not need the table: a known kind, at least one non-negative field id,
// a non-empty well-formed selection in exactly one of the two row forms, and
// the limits. Unknown fields in any precondition message are refused rather
// than ignored: a field this build does not know might narrow or widen the
// cells meant. Duplicate field ids are merged. Errors are *InvalidError.
func Decode(pbs []*lancepb.Precondition, lim Limits) ([]Precondition, error) {
	lim = lim.withDefaults()
	if len(pbs) > lim.MaxPreconditions {
		return nil, invalidf(-1, InvalidLimit, "%d preconditions, limit %d", len(pbs), lim.MaxPreconditions)
	}
	out, buf := decodeBuffers(pbs)
	groups := 0
	for i, pb := range pbs {
		p, err := decodeOne(pb, lim, buf)
		if err != nil {
			return nil, err.at(i)
		}
		groups += len(p.Fields) * p.Rows.Len()
		if groups > lim.MaxCellGroups {
			return nil, invalidf(i, InvalidLimit, "fields × fragments reach %d, limit %d", groups, lim.MaxCellGroups)
		}
		out = append(out, p)
	}
	return out, nil
}

// single is one precondition and the one fragment it selects: the usual
// precondition, decoded in one allocation instead of two.
type single struct {
	p     [1]Precondition
	frags [1]fragRows
}

// decodeBuffers returns the room Decode fills: the preconditions, and
// for the usual single precondition on one fragment, its selection too.
func decodeBuffers(pbs []*lancepb.Precondition) ([]Precondition, []fragRows) {
	if len(pbs) == 1 && len(pbs[0].GetCellsUnchanged().GetRows()) == 1 {
		x := &single{}
		return x.p[:0:1], x.frags[:0:1]
	}
	return make([]Precondition, 0, len(pbs)), nil
}

// decodeOne decodes pb; a selection of rows fits in buf if it has room.
func decodeOne(pb *lancepb.Precondition, lim Limits, buf []fragRows) (Precondition, *InvalidError) {
	if pb == nil {
		return Precondition{}, invalidf(0, InvalidKind, "nil precondition")
	}
	if n, ok := unknownField(pb.ProtoReflect().GetUnknown()); ok {
		return Precondition{}, invalidf(0, InvalidKind, "unknown precondition kind or field %d", n)
	}
	cu := pb.GetCellsUnchanged()
	if cu == nil {
		return Precondition{}, invalidf(0, InvalidKind, "no precondition kind set")
	}
	if n, ok := unknownField(cu.ProtoReflect().GetUnknown()); ok {
		return Precondition{}, invalidf(0, InvalidEncoding, "unknown field %d in CellsUnchanged", n)
	}
	fields, err := checkFields(cu.GetFieldIds(), lim)
	if err != nil {
		return Precondition{}, err
	}
	var rows RowSelection
	switch tree := cu.GetRowAddrTreeMap(); {
	case len(cu.GetRows()) > 0 && len(tree) > 0:
		return Precondition{}, invalidf(0, InvalidEncoding, "both rows and row_addr_tree_map are set")
	case len(tree) > 0:
		rows, err = selectionFromTreeMap(tree, lim)
	default:
		rows, err = selectionFromProto(cu.GetRows(), lim, buf)
	}
	if err != nil {
		return Precondition{}, err
	}
	return Precondition{Fields: fields, Rows: rows}, nil
}

// checkFields checks the field list and returns it without duplicates.
func checkFields(ids []int32, lim Limits) ([]int32, *InvalidError) {
	if len(ids) == 0 {
		return nil, invalidf(0, InvalidEmptyFields, "no field ids")
	}
	if len(ids) > lim.MaxFields {
		return nil, invalidf(0, InvalidLimit, "%d field ids, limit %d", len(ids), lim.MaxFields)
	}
	out := make([]int32, 0, len(ids))
	for _, f := range ids {
		if f < 0 {
			return nil, invalidf(0, InvalidNegativeField, "field id %d", f)
		}
		dup := false
		for _, g := range out {
			if g == f {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, f)
		}
	}
	return out, nil
}

// Validate checks that txn may carry pre and that pre names only cells that
// exist in pinned, the manifest at txn's read version. Beyond Decode's
// checks it rejects: preconditions on Overwrite, Restore, Clone or an
// operation this build does not know; on dataset creation (read version 0)
// or a detached read version; fields missing from pinned's schema; fragments
// missing from pinned; offsets at or past a fragment's physical rows; and
// limits exceeded. A transaction without preconditions is always valid.
//
// Errors are *InvalidError, except for misuse: a nil txn or pinned, or a
// pinned manifest whose version is not txn's read version.
func Validate(pinned *table.Manifest, txn *lancepb.Transaction, pre []Precondition, lim Limits) error {
	if len(pre) == 0 {
		return nil
	}
	if txn == nil || pinned == nil {
		return errors.New("evaluator: Validate needs a transaction and its pinned manifest")
	}
	if err := checkOperation(txn); err != nil {
		return err
	}
	if pinned.Version() != txn.GetReadVersion() {
		return fmt.Errorf("evaluator: pinned manifest is version %d, transaction read version is %d",
			pinned.Version(), txn.GetReadVersion())
	}
	lim = lim.withDefaults()
	if len(pre) > lim.MaxPreconditions {
		return invalidf(-1, InvalidLimit, "%d preconditions, limit %d", len(pre), lim.MaxPreconditions)
	}
	groups := 0
	for i := range pre {
		p := &pre[i]
		if len(p.Fields) > lim.MaxFields {
			return invalidf(i, InvalidLimit, "%d field ids, limit %d", len(p.Fields), lim.MaxFields)
		}
		if p.Rows.Len() > lim.MaxFragments {
			return invalidf(i, InvalidLimit, "%d fragments selected, limit %d", p.Rows.Len(), lim.MaxFragments)
		}
		groups += len(p.Fields) * p.Rows.Len()
		if groups > lim.MaxCellGroups {
			return invalidf(i, InvalidLimit, "fields × fragments reach %d, limit %d", groups, lim.MaxCellGroups)
		}
		if err := checkPinned(ofManifest(pinned), p); err != nil {
			return err.at(i)
		}
	}
	return nil
}

// Prepare decodes txn's preconditions and validates them against pinned:
// Decode followed by Validate.
func Prepare(pinned *table.Manifest, txn *lancepb.Transaction, lim Limits) ([]Precondition, error) {
	pre, err := Decode(txn.GetPreconditions(), lim)
	if err != nil {
		return nil, err
	}
	if err := Validate(pinned, txn, pre, lim); err != nil {
		return nil, err
	}
	return pre, nil
}

// detachedVersion is Lance's marker bit of detached versions.
const detachedVersion = 1 << 63

func checkOperation(txn *lancepb.Transaction) error {
	op, err := table.OpOf(txn)
	if err != nil {
		return invalidf(-1, InvalidOperation, "preconditions on a transaction whose operation is unknown: %v", err)
	}
	switch {
	case op == table.OpOverwrite, op == table.OpRestore, op == table.OpClone:
		return invalidf(-1, InvalidOperation, "preconditions on %s: it replaces the table, there are no cells to protect", op)
	case !op.Supported():
		return invalidf(-1, InvalidOperation, "preconditions on unsupported operation %s", op)
	case txn.GetReadVersion() == 0:
		return invalidf(-1, InvalidOperation, "preconditions on dataset creation (read version 0)")
	case txn.GetReadVersion()&detachedVersion != 0:
		return invalidf(-1, InvalidOperation, "preconditions on a detached read version %#x", txn.GetReadVersion())
	}
	return nil
}

// checkPinned checks p against the manifest it was read from. It costs
// O(fields + fragments named), with one map or trie lookup each.
func checkPinned(pinned snapshot, p *Precondition) *InvalidError {
	if len(p.Fields) == 0 {
		return invalidf(0, InvalidEmptyFields, "no field ids")
	}
	schema := pinned.Schema()
	for _, f := range p.Fields {
		if f < 0 {
			return invalidf(0, InvalidNegativeField, "field id %d", f)
		}
		if _, ok := schema.Field(f); !ok {
			return invalidf(0, InvalidUnknownField, "field %d is not in the schema at version %d", f, pinned.Version())
		}
	}
	if p.Rows.IsEmpty() {
		return invalidf(0, InvalidEmptySelection, "no rows selected")
	}
	for _, fr := range p.Rows.frags {
		frag, ok := pinned.Fragment(fr.id)
		if !ok {
			return invalidf(0, InvalidUnknownFragment, "fragment %d is not in version %d", fr.id, pinned.Version())
		}
		if fr.rows == nil {
			continue
		}
		if fr.rows.IsEmpty() {
			return invalidf(0, InvalidEmptySelection, "fragment %d: no rows selected", fr.id)
		}
		if max := fr.rows.Maximum(); uint64(max) >= frag.PhysicalRows() {
			return invalidf(0, InvalidOffset, "fragment %d: offset %d, but the fragment has %d physical rows at version %d",
				fr.id, max, frag.PhysicalRows(), pinned.Version())
		}
	}
	return nil
}
