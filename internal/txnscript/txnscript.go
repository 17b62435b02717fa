// Package txnscript builds Lance transactions from one-line descriptions,
// for the scenario scripts of the decision core (committer/testdata) and
// the table model (table/testdata). A description is an operation and
// key=value arguments; precondition lines follow it:
//
//	replace frag=0 field=y
//	pre fields=x frag=0 rows=0-9
//
// Every table a script builds has the schema id (field 0), x (1), y (2).
// Data files are named data/f1.lance, data/f2.lance, … in the order the
// script makes them.
package txnscript

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"

	"cellguard/evaluator"
	"cellguard/proto/lancepb"
)

// Schema is the schema of every scripted table.
var Schema = []*lancepb.Field{
	{Id: 0, Name: "id", ParentId: -1, LogicalType: "int64"},
	{Id: 1, Name: "x", ParentId: -1, LogicalType: "int64", Nullable: true},
	{Id: 2, Name: "y", ParentId: -1, LogicalType: "int64", Nullable: true},
}

// Operations is the help text of the operations Build knows.
const Operations = `  overwrite [frags=N] [rows=N]      create (or replace) the table: N fragments, one file of id, x, y each
  append [frags=N] [rows=N]         new fragments, one file of id, x, y each
  delete frag=N[,N]                 delete whole fragments
  replace frag=N field=F            a new data file for field F (DataReplacement)
  overlay frag=N field=F rows=A-B   new values of F at some rows (DataOverlay)
  index field=F name=NAME [frag=N[,N]]  a CreateIndex over F, covering fragments (default 0)
  project fields=F[,F]              keep only these fields (Project)
  restore version=V                 restore an older version
  empty                             a transaction with no operation
  bytes text=…                      a body that is not a transaction
and after the operation, any number of
  pre fields=F[,F] frag=N[,N] [rows=A-B[,C]]   cells unchanged since the read version`

// Builder makes transactions; it numbers the data files it names.
type Builder struct {
	files int
}

// Body is a staged message: a transaction, or (bytes) raw bytes.
type Body struct {
	Txn *lancepb.Transaction // nil for raw bytes
	Raw []byte
}

// Build parses lines: the operation, then precondition lines.
func (b *Builder) Build(uuid string, readVersion uint64, lines []string) (Body, error) {
	if len(lines) == 0 || strings.TrimSpace(lines[0]) == "" {
		return Body{}, fmt.Errorf("txnscript: no operation line")
	}
	op, args, err := ParseLine(lines[0])
	if err != nil {
		return Body{}, err
	}
	if op == "bytes" {
		return Body{Raw: []byte(args["text"])}, nil
	}
	txn := &lancepb.Transaction{Uuid: uuid, ReadVersion: readVersion}
	if err := b.operation(txn, op, args); err != nil {
		return Body{}, fmt.Errorf("txnscript: %s: %w", lines[0], err)
	}
	for _, l := range lines[1:] {
		kind, pa, err := ParseLine(l)
		if err != nil {
			return Body{}, err
		}
		if kind != "pre" {
			return Body{}, fmt.Errorf("txnscript: want a pre line, got %q", l)
		}
		p, err := precondition(pa)
		if err != nil {
			return Body{}, fmt.Errorf("txnscript: %s: %w", l, err)
		}
		txn.Preconditions = append(txn.Preconditions, p)
	}
	return Body{Txn: txn}, nil
}

func (b *Builder) operation(txn *lancepb.Transaction, op string, args map[string]string) error {
	var err error
	num := func(key string, def uint64) uint64 {
		n, e := uintArg(args, key, def)
		if e != nil && err == nil {
			err = e
		}
		return n
	}
	field := func() int32 {
		f, e := FieldID(args["field"])
		if e != nil && err == nil {
			err = e
		}
		return f
	}
	newFrags := func() []*lancepb.DataFragment {
		frags, rows := num("frags", 1), num("rows", 100)
		var out []*lancepb.DataFragment
		for range frags {
			out = append(out, &lancepb.DataFragment{PhysicalRows: rows, Files: []*lancepb.DataFile{b.file(0, 1, 2)}})
		}
		return out
	}
	switch op {
	case "overwrite":
		txn.Operation = &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{Schema: Schema, Fragments: newFrags()}}
	case "append":
		txn.Operation = &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{Fragments: newFrags()}}
	case "delete":
		ids, e := uintList(args, "frag")
		if e != nil {
			return e
		}
		txn.Operation = &lancepb.Transaction_Delete_{Delete: &lancepb.Transaction_Delete{DeletedFragmentIds: ids, Predicate: "true"}}
	case "replace":
		txn.Operation = &lancepb.Transaction_DataReplacement_{DataReplacement: &lancepb.Transaction_DataReplacement{
			Replacements: []*lancepb.Transaction_DataReplacementGroup{{FragmentId: num("frag", 0), NewFile: b.file(field())}}}}
	case "overlay":
		cover, e := Rows(args["rows"])
		if e != nil {
			return e
		}
		bm, e := cover.ToBytes()
		if e != nil {
			return e
		}
		txn.Operation = &lancepb.Transaction_DataOverlay_{DataOverlay: &lancepb.Transaction_DataOverlay{Groups: []*lancepb.Transaction_DataOverlayGroup{{
			FragmentId: num("frag", 0), Overlays: []*lancepb.DataOverlayFile{{
				DataFile: b.file(field()),
				Coverage: &lancepb.DataOverlayFile_SharedOffsetBitmap{SharedOffsetBitmap: bm},
			}},
		}}}}
	case "index":
		f := field()
		id := sha256.Sum256([]byte("index " + args["name"]))
		if _, ok := args["frag"]; !ok {
			args["frag"] = "0"
		}
		covered, e := uintList(args, "frag")
		if e != nil {
			return e
		}
		bm := roaring.New()
		for _, c := range covered {
			bm.Add(uint32(c))
		}
		cover, e := bm.ToBytes()
		if e != nil {
			return e
		}
		txn.Operation = &lancepb.Transaction_CreateIndex_{CreateIndex: &lancepb.Transaction_CreateIndex{NewIndices: []*lancepb.IndexMetadata{{
			Uuid: &lancepb.UUID{Uuid: id[:16]}, Fields: []int32{f}, Name: args["name"], DatasetVersion: txn.GetReadVersion(),
			FragmentBitmap: cover,
		}}}}
	case "project":
		var keep []*lancepb.Field
		for _, name := range strings.Split(args["fields"], ",") {
			f, e := FieldID(name)
			if e != nil {
				return e
			}
			keep = append(keep, Schema[f])
		}
		txn.Operation = &lancepb.Transaction_Project_{Project: &lancepb.Transaction_Project{Schema: keep, PreservesNullability: true}}
	case "restore":
		txn.Operation = &lancepb.Transaction_Restore_{Restore: &lancepb.Transaction_Restore{Version: num("version", 0)}}
	case "empty":
	default:
		return fmt.Errorf("unknown operation %q", op)
	}
	return err
}

func (b *Builder) file(fields ...int32) *lancepb.DataFile {
	b.files++
	cols := make([]int32, len(fields))
	for i := range cols {
		cols[i] = int32(i)
	}
	return &lancepb.DataFile{Path: fmt.Sprintf("data/f%d.lance", b.files), Fields: fields, ColumnIndices: cols, FileMajorVersion: 2, FileMinorVersion: 0}
}

// precondition: fields=F[,F] frag=N[,N] [rows=A-B[,C]]
func precondition(args map[string]string) (*lancepb.Precondition, error) {
	var fields []int32
	for _, name := range strings.Split(args["fields"], ",") {
		f, err := FieldID(name)
		if err != nil {
			return nil, err
		}
		fields = append(fields, f)
	}
	frags, err := uintList(args, "frag")
	if err != nil {
		return nil, err
	}
	sel := evaluator.WholeFragments(frags...)
	if r, ok := args["rows"]; ok {
		if len(frags) != 1 {
			return nil, fmt.Errorf("rows= names the rows of one fragment")
		}
		bm, err := Rows(r)
		if err != nil {
			return nil, err
		}
		sel = evaluator.FragmentBitmap(frags[0], bm)
	}
	return evaluator.CellsUnchanged(sel, fields...).Proto(), nil
}

// FieldID is the id of a field named in a script: id, x, y, or a number.
func FieldID(name string) (int32, error) {
	for _, f := range Schema {
		if f.GetName() == name {
			return f.GetId(), nil
		}
	}
	if n, err := strconv.Atoi(name); err == nil {
		return int32(n), nil
	}
	return 0, fmt.Errorf("unknown field %q (the schema is id, x, y)", name)
}

// FieldName is the name of field id, or its number.
func FieldName(id int32) string {
	for _, f := range Schema {
		if f.GetId() == id {
			return f.GetName()
		}
	}
	return strconv.Itoa(int(id))
}

// Rows parses "A-B,C,…": physical offsets, ranges inclusive.
func Rows(s string) (*roaring.Bitmap, error) {
	bm := roaring.New()
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(lo, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("rows %q: %w", s, err)
		}
		end := a
		if isRange {
			if end, err = strconv.ParseUint(hi, 10, 32); err != nil {
				return nil, fmt.Errorf("rows %q: %w", s, err)
			}
		}
		bm.AddRange(a, end+1)
	}
	return bm, nil
}

// UUID is the uuid a script's label stands for: the same label, the same
// uuid, in every run.
func UUID(label string) string {
	h := sha256.Sum256([]byte(label))
	h[6] = h[6]&0x0f | 0x40
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// ParseLine splits "word key=value key=value". A value holds no spaces,
// except a last text=…, which takes the rest of the line.
func ParseLine(line string) (string, map[string]string, error) {
	word, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
	args := map[string]string{}
	for rest = strings.TrimSpace(rest); rest != ""; rest = strings.TrimSpace(rest) {
		if strings.HasPrefix(rest, "text=") {
			args["text"] = strings.TrimPrefix(rest, "text=")
			break
		}
		var kv string
		kv, rest, _ = strings.Cut(rest, " ")
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return "", nil, fmt.Errorf("txnscript: %q: want key=value, got %q", line, kv)
		}
		args[k] = v
	}
	return word, args, nil
}

func uintArg(args map[string]string, key string, def uint64) (uint64, error) {
	s, ok := args[key]
	if !ok {
		return def, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %w", key, s, err)
	}
	return n, nil
}

func uintList(args map[string]string, key string) ([]uint64, error) {
	var out []uint64
	for _, s := range strings.Split(args[key], ",") {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: %w", key, args[key], err)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}
