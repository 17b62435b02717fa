// Package location opens where a dataset's Lance files live — a local
// directory or any gocloud.dev/blob URL — for the publisher and the Go
// SDK alike. Start at OpenLocation; Location.ReadRegular reads a file
// only if it is a regular one (no FIFO or device can wedge a reader), and
// CreateIfAbsent is the put-if-absent every published manifest goes
// through.
package location
