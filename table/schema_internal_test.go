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
		schemas.mu.Lock()
		peak = max(peak, len(schemas.m))
		schemas.mu.Unlock()
	}
	if peak > 1000 {
		t.Fatalf("the set held %d entries for 2000 schemas dropped as they were built", peak)
	}
}
