package data

import (
	"errors"
	"fmt"

	"cellguard/table"
)

// Sentinel errors. Errors from this package wrap one of them or are a
// *FormatError, so callers classify failures with errors.Is and errors.As.
var (
	// ErrNotFound reports something the caller or the manifest names that
	// does not exist: a fragment or field id, or a file the manifest points
	// at that is missing from the store.
	ErrNotFound = errors.New("not found")

	// ErrDeleted reports a point read of a row that the fragment's deletion
	// vector marks deleted.
	ErrDeleted = errors.New("row deleted")

	// ErrOutOfRange reports a physical offset at or past the end of its
	// fragment.
	ErrOutOfRange = errors.New("offset out of range")

	// ErrInvalidArgument reports writer input that cannot make a valid file:
	// columns of unequal length, a type that does not match the field,
	// nulls in a non-nullable field, duplicate offsets.
	ErrInvalidArgument = errors.New("invalid argument")

	// ErrUnsupported reports a field type, deletion file form or file
	// location this package does not handle (nested types, base paths).
	ErrUnsupported = errors.New("unsupported")
)

// FormatError reports a file that exists but does not hold what the
// manifest says it does: bytes that are not an Arrow IPC file or a roaring
// bitmap, a column whose type, field id or length disagrees with the
// manifest, coverage past the end of the fragment. It matches
// errors.Is(err, table.ErrMalformed).
type FormatError struct {
	Path string // the file, relative to the dataset root
	Msg  string // what is wrong
	Err  error  // the underlying decoder error, if any
}

func (e *FormatError) Error() string {
	s := "data: " + e.Path + ": " + e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying decoder error, if any.
func (e *FormatError) Unwrap() error { return e.Err }

// Is reports whether target is table.ErrMalformed.
func (e *FormatError) Is(target error) bool { return target == table.ErrMalformed }

func formatErr(path string, cause error, format string, args ...any) error {
	return &FormatError{Path: path, Msg: fmt.Sprintf(format, args...), Err: cause}
}

// errorf wraps sentinel with the operation and a message, in the form
// "data: op: message: sentinel".
func errorf(op string, sentinel error, format string, args ...any) error {
	return fmt.Errorf("data: %s: %s: %w", op, fmt.Sprintf(format, args...), sentinel)
}
