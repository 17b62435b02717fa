package data

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// The Arrow IPC decoder trusts the lengths a file declares: the number of
// fields and of metadata entries in the footer's schema (it allocates
// slices that long before reading them), and the uncompressed length of
// compressed buffers. A few corrupt bytes could make it allocate
// gigabytes. checkFooter bounds the schema's vectors by the file size
// first, and a budgetAllocator bounds what decoding may allocate.

// checkFooter walks the flatbuffer footer of an Arrow IPC file
// (Footer.schema.fields, recursively their children, every custom_metadata
// and the record batch list) and checks that each vector fits in the
// footer, so no declared length exceeds what the bytes can hold.
func checkFooter(b []byte) error {
	const trailer = 10 // int32 footer length + "ARROW1"
	if len(b) < trailer+8 || string(b[len(b)-6:]) != "ARROW1" || string(b[:6]) != "ARROW1" {
		return errors.New("no Arrow IPC file magic")
	}
	n := int64(int32(binary.LittleEndian.Uint32(b[len(b)-trailer:])))
	if n <= 0 || n > int64(len(b)-trailer-8) {
		return fmt.Errorf("footer length %d out of range", n)
	}
	fb := flatbuf(b[int64(len(b)-trailer)-n : len(b)-trailer])
	root, err := fb.u32(0)
	if err != nil {
		return err
	}
	footer := int64(root)
	schema, ok, err := fb.ref(footer, 1)
	if err != nil || !ok {
		return errors.Join(err, errors.New("footer has no schema"))
	}
	if err := fb.checkFields(schema, 1, 0); err != nil {
		return err
	}
	if err := fb.checkVector(schema, 2, 4, true); err != nil { // custom_metadata
		return err
	}
	if err := fb.checkVector(footer, 2, 24, false); err != nil { // dictionaries: Block structs
		return err
	}
	if err := fb.checkVector(footer, 3, 24, false); err != nil { // record batches: Block structs
		return err
	}
	return fb.checkVector(footer, 4, 4, true) // custom_metadata
}

// flatbuf reads a flatbuffer with every offset checked.
type flatbuf []byte

var errFlatbuf = errors.New("footer flatbuffer offset out of range")

func (f flatbuf) u32(pos int64) (uint32, error) {
	if pos < 0 || pos+4 > int64(len(f)) {
		return 0, errFlatbuf
	}
	return binary.LittleEndian.Uint32(f[pos:]), nil
}

func (f flatbuf) u16(pos int64) (uint16, error) {
	if pos < 0 || pos+2 > int64(len(f)) {
		return 0, errFlatbuf
	}
	return binary.LittleEndian.Uint16(f[pos:]), nil
}

// field returns the position of field i of the table at t, or ok=false
// when the table does not have it.
func (f flatbuf) field(t int64, i int) (pos int64, ok bool, err error) {
	so, err := f.u32(t)
	if err != nil {
		return 0, false, err
	}
	vt := t - int64(int32(so))
	size, err := f.u16(vt)
	if err != nil {
		return 0, false, err
	}
	if int64(4+2*i) >= int64(size) {
		return 0, false, nil
	}
	off, err := f.u16(vt + int64(4+2*i))
	if err != nil || off == 0 {
		return 0, false, err
	}
	return t + int64(off), true, nil
}

// ref returns the position of the table, vector or string that field i of
// the table at t refers to.
func (f flatbuf) ref(t int64, i int) (int64, bool, error) {
	pos, ok, err := f.field(t, i)
	if err != nil || !ok {
		return 0, false, err
	}
	off, err := f.u32(pos)
	if err != nil {
		return 0, false, err
	}
	return pos + int64(off), true, nil
}

// vector returns the element count and first element position of the
// vector that field i of the table at t refers to, checking that count
// elements of elemSize bytes fit.
func (f flatbuf) vector(t int64, i int, elemSize int64) (n, first int64, err error) {
	v, ok, err := f.ref(t, i)
	if err != nil || !ok {
		return 0, 0, err
	}
	l, err := f.u32(v)
	if err != nil {
		return 0, 0, err
	}
	if int64(l)*elemSize > int64(len(f))-v-4 {
		return 0, 0, fmt.Errorf("footer vector of %d entries overruns the footer", l)
	}
	return int64(l), v + 4, nil
}

// checkVector checks the vector of field i of the table at t; with tables,
// each element must also point inside the buffer.
func (f flatbuf) checkVector(t int64, i int, elemSize int64, tables bool) error {
	n, first, err := f.vector(t, i, elemSize)
	if err != nil || !tables {
		return err
	}
	for k := range n {
		e := first + 4*k
		off, _ := f.u32(e)
		if _, err := f.u32(e + int64(off)); err != nil {
			return err
		}
	}
	return nil
}

// checkFields checks the vector of Field tables in field i of the table at
// t, and their children and metadata, to a bounded depth.
func (f flatbuf) checkFields(t int64, i int, depth int) error {
	if depth > 64 {
		return errors.New("fields nested too deep")
	}
	n, first, err := f.vector(t, i, 4)
	if err != nil {
		return err
	}
	for k := range n {
		e := first + 4*k
		off, _ := f.u32(e)
		field := e + int64(off)
		if _, err := f.u32(field); err != nil {
			return err
		}
		if err := f.checkFields(field, 5, depth+1); err != nil { // children
			return err
		}
		if err := f.checkVector(field, 6, 4, true); err != nil { // custom_metadata
			return err
		}
	}
	return nil
}

// budgetAllocator is a Go allocator that panics (caught by decodeIPC)
// once the bytes allocated through it exceed a budget. It is used for one
// decode, from one goroutine.
type budgetAllocator struct {
	memory.Allocator
	left int
}

func (a *budgetAllocator) Allocate(size int) []byte {
	a.take(size)
	return a.Allocator.Allocate(size)
}

func (a *budgetAllocator) Reallocate(size int, b []byte) []byte {
	a.take(size - len(b))
	return a.Allocator.Reallocate(size, b)
}

func (a *budgetAllocator) take(n int) {
	if n > a.left {
		panic(fmt.Sprintf("decoding needs more than %d more bytes", a.left))
	}
	a.left -= n
}
