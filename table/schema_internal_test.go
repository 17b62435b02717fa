package table

import (
	"fmt"
	"runtime"
	"testing"

	"cellguard/proto/lancepb"
)

// TestSchemaSetSweepsCollectedSchemas checks that schemas no version
// holds do not pile up in the set: a stream of distinct schemas, each
// dropped at once, leaves the set bounded.
func TestSchemaSetSweepsCollectedSchemas(t *testing.T) {
	peak := 0
	for i := range 2000 {
		_, err := NewSchema([]*lancepb.Field{{Id: 0, ParentId: -1, Name: fmt.Sprintf("sweep%d", i)}})
		if err != nil {
			t.Fatal(err)
		}
		if i%100 == 99 {
			runtime.GC()
		}
		peak = max(peak, schemas.len())
	}
	if peak > 1000 {
		t.Fatalf("the set held %d entries for 2000 schemas dropped as they were built", peak)
	}
}

// TestWideSchemaIsNotShared checks that a schema past maxSchemaKey is
// built on its own each time, and a narrow one is shared.
func TestWideSchemaIsNotShared(t *testing.T) {
	fields := func(n int) []*lancepb.Field {
		fs := make([]*lancepb.Field, n)
		for i := range fs {
			fs[i] = &lancepb.Field{Id: int32(i), ParentId: -1, Name: fmt.Sprintf("wide_column_%05d", i), LogicalType: "double"}
		}
		return fs
	}
	a, errA := NewSchema(fields(2000))
	b, errB := NewSchema(fields(2000))
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if a == b {
		t.Fatal("a schema of 2000 columns was shared")
	}
	c, _ := NewSchema(fields(3))
	d, _ := NewSchema(fields(3))
	if c != d {
		t.Fatal("a schema of 3 columns was not shared")
	}
}
