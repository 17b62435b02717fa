package table

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error the package returns wraps one of them, so
// callers can classify failures with errors.Is.
var (
	// ErrMalformed reports bytes or messages that do not form a valid table
	// object: truncated files, wrong magic, protobuf that does not decode,
	// duplicate fragment ids, bitmaps that fail validation.
	ErrMalformed = errors.New("malformed")

	// ErrUnsupportedOperation reports a transaction whose operation this
	// build does not implement (or that has no operation at all). It is never
	// treated as a no-op.
	ErrUnsupportedOperation = errors.New("unsupported operation")

	// ErrInvalidTransaction reports a transaction that decodes but cannot
	// apply to the manifest it targets: unknown fragment or field, negative
	// field id where a real one is needed, tombstones in the wrong place.
	ErrInvalidTransaction = errors.New("invalid transaction")

	// ErrVersionNotFound reports a version that a Restore (or a reader)
	// asked for and that is not available.
	ErrVersionNotFound = errors.New("version not found")
)

// Error carries what failed and where, wrapping one of the sentinels.
type Error struct {
	Op  string // what was being done: "decode manifest", "apply delete", …
	Err error  // a sentinel, possibly wrapping a cause
	Msg string // what exactly is wrong
}

func (e *Error) Error() string {
	if e.Msg == "" {
		return e.Op + ": " + e.Err.Error()
	}
	return e.Op + ": " + e.Err.Error() + ": " + e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

func errorf(op string, sentinel error, format string, args ...any) error {
	return &Error{Op: op, Err: sentinel, Msg: fmt.Sprintf(format, args...)}
}
