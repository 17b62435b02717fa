package table

import (
	"encoding/binary"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// Schema is the flattened Lance schema of one version. It is immutable and
// shared between versions that do not change it.
type Schema struct {
	fields []*lancepb.Field
	byID   map[int32]*lancepb.Field
}

// NewSchema checks fields and builds a Schema over them. Field ids must be
// non-negative and unique, and every parent id must be -1 or name another
// field. The fields are not copied: the caller must not modify them later.
//
// Schemas of the same fields are one Schema while any is in use (the
// returned Schema may hold another caller's equal fields): a committer
// serving thousands of tables of a few schemas holds each schema once,
// where a copy per table would cost about a KiB each.
func NewSchema(fields []*lancepb.Field) (*Schema, error) {
	key, ok := schemaKey(fields)
	if ok {
		if s := schemas.get(key); s != nil {
			return s, nil
		}
	}
	s, err := buildSchema(fields)
	if err != nil || !ok {
		return s, err
	}
	return schemas.put(key, s), nil
}

func buildSchema(fields []*lancepb.Field) (*Schema, error) {
	const op = "build schema"
	s := &Schema{fields: fields, byID: make(map[int32]*lancepb.Field, len(fields))}
	for _, f := range fields {
		if f.GetId() < 0 {
			return nil, errorf(op, ErrMalformed, "field %q has negative id %d", f.GetName(), f.GetId())
		}
		if _, dup := s.byID[f.GetId()]; dup {
			return nil, errorf(op, ErrMalformed, "duplicate field id %d", f.GetId())
		}
		s.byID[f.GetId()] = f
	}
	for _, f := range fields {
		if p := f.GetParentId(); p != -1 {
			if _, ok := s.byID[p]; !ok {
				return nil, errorf(op, ErrMalformed, "field %d has unknown parent %d", f.GetId(), p)
			}
		}
	}
	return s, nil
}

// schemaKey is the identity of fields: each one's deterministic encoding,
// length first. Fields with a nil entry, that do not encode, or whose
// encodings pass maxSchemaKey have none and are never shared.
func schemaKey(fields []*lancepb.Field) (string, bool) {
	opts := proto.MarshalOptions{Deterministic: true}
	sizes := make([]int, len(fields))
	n := 0
	for i, f := range fields {
		if f == nil {
			return "", false
		}
		sizes[i] = opts.Size(f)
		if n += binary.MaxVarintLen64 + sizes[i]; n > maxSchemaKey {
			return "", false
		}
	}
	b := make([]byte, 0, n)
	for i, f := range fields {
		b = binary.AppendUvarint(b, uint64(sizes[i]))
		var err error
		if b, err = opts.MarshalAppend(b, f); err != nil {
			return "", false
		}
	}
	return string(b), true
}

// maxSchemaKey bounds the schemas shared: the key costs about the
// schema's encoded size, and a table of thousands of columns, whose
// versions each add one, would hold a key that size per version in its
// window, for little to share.
const maxSchemaKey = 16 << 10

// schemas holds the schemas in use by their fields' key, weakly.
var schemas = newWeakSet[string, Schema](nil)

// Field returns the field with the given id.
func (s *Schema) Field(id int32) (*lancepb.Field, bool) {
	f, ok := s.byID[id]
	return f, ok
}

// Fields returns the flattened fields in manifest order. Callers must not
// modify them.
func (s *Schema) Fields() []*lancepb.Field { return s.fields }

// Len returns the number of fields, nested ones included.
func (s *Schema) Len() int { return len(s.fields) }

// MaxFieldID returns the largest field id, or -1 for an empty schema.
func (s *Schema) MaxFieldID() int32 {
	max := int32(-1)
	for id := range s.byID {
		if id > max {
			max = id
		}
	}
	return max
}

// SameType reports whether field id has the same logical type and
// nullability in s and other: the precondition contract's notion of an
// unchanged field (names may differ).
func (s *Schema) SameType(other *Schema, id int32) bool {
	a, ok1 := s.byID[id]
	b, ok2 := other.byID[id]
	return ok1 && ok2 && a.GetLogicalType() == b.GetLogicalType() && a.GetNullable() == b.GetNullable()
}
