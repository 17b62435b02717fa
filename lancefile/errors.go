package lancefile

import (
	"errors"
	"fmt"
)

// ErrMalformed is wrapped by every error about a file that does not follow
// the format: a bad footer, an offset outside the file, a buffer too short
// for the values it should hold, a protobuf that does not decode.
var ErrMalformed = errors.New("malformed lance file")

// MalformedError says what is wrong with a file. It wraps ErrMalformed.
type MalformedError struct {
	Op     string // what was being read, e.g. "footer", "column 2 page 0"
	Reason string
}

func (e *MalformedError) Error() string {
	return fmt.Sprintf("lancefile: %s: %s: %s", e.Op, ErrMalformed, e.Reason)
}

func (e *MalformedError) Unwrap() error { return ErrMalformed }

func malformed(op, format string, args ...any) error {
	return &MalformedError{Op: op, Reason: fmt.Sprintf(format, args...)}
}

// UnsupportedEncodingError is a page or column encoding this package does
// not decode (yet). Name is the encoding's protobuf name, for example
// "fsst", "inline_bitpacking" or "general(zstd)". The values are never
// guessed.
type UnsupportedEncodingError struct {
	Name string
	Op   string // where it was found, e.g. "column 1 page 0"
}

func (e *UnsupportedEncodingError) Error() string {
	return fmt.Sprintf("lancefile: %s: unsupported encoding %q", e.Op, e.Name)
}

// UnsupportedTypeError is an Arrow type (writer) or Lance logical type
// (reader) this package does not handle.
type UnsupportedTypeError struct {
	Field string
	Type  string
}

func (e *UnsupportedTypeError) Error() string {
	return fmt.Sprintf("lancefile: field %q: unsupported type %s", e.Field, e.Type)
}

// UnsupportedVersionError is a footer version this package does not read.
type UnsupportedVersionError struct {
	Major, Minor uint16
}

func (e *UnsupportedVersionError) Error() string {
	return fmt.Sprintf("lancefile: unsupported file version (%d, %d) in footer; want 2.0 (0,3 or 2,0), 2.1 (2,1) or 2.2 (2,2)", e.Major, e.Minor)
}

// ErrClosed is returned by a Writer used after Close or after a write
// error.
var ErrClosed = errors.New("lancefile: writer closed")

// InputError is a record batch or argument the writer refuses: a schema
// that differs from the writer's, a null in a non-nullable field, nulls
// inside a fixed-size list, a row range out of bounds.
type InputError struct {
	Reason string
}

func (e *InputError) Error() string { return "lancefile: " + e.Reason }

func inputErr(format string, args ...any) error {
	return &InputError{Reason: fmt.Sprintf(format, args...)}
}
