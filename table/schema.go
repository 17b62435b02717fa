package table

import (
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
func NewSchema(fields []*lancepb.Field) (*Schema, error) {
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
