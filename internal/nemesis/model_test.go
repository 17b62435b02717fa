package nemesis

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// at builds an op over [call, ret] (in ms from an origin).
func at(op Op, call, ret int) Op {
	base := time.Unix(1000, 0)
	op.Dataset = "d"
	op.Call, op.Return = base.Add(time.Duration(call)*time.Millisecond), base.Add(time.Duration(ret)*time.Millisecond)
	return op
}

func read(client int, v uint64) Op { return Op{Client: client, Kind: Read, Version: v} }
func committed(client int, r, v uint64) Op {
	return Op{Client: client, Kind: Commit, Read: r, Result: Committed, Version: v}
}
func rejected(client int, r uint64) Op {
	return Op{Client: client, Kind: Commit, Read: r, Result: Rejected}
}
func unknown(client int, r uint64) Op {
	return Op{Client: client, Kind: Commit, Read: r, Result: Unknown}
}

// TestLinearizable: histories the SDK's contract allows are linearizable,
// each kind of violation is not, and an unknown outcome may take effect
// (or not) at any time after its call.
func TestLinearizable(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []Op
		want porcupine.CheckResult
	}{
		{"sequential", []Op{at(read(0, 1), 0, 1), at(committed(0, 1, 2), 2, 3), at(read(0, 2), 4, 5)}, porcupine.Ok},
		{"concurrent commits, either order", []Op{at(committed(0, 1, 3), 0, 10), at(committed(1, 1, 2), 1, 9)}, porcupine.Ok},
		{"rejected leaves the head", []Op{at(rejected(0, 1), 0, 1), at(read(1, 1), 2, 3)}, porcupine.Ok},
		{"unknown took effect", []Op{at(unknown(0, 1), 0, 1), at(read(1, 2), 5, 6), at(committed(1, 2, 3), 7, 8)}, porcupine.Ok},
		{"unknown did not", []Op{at(unknown(0, 1), 0, 1), at(read(1, 1), 5, 6), at(committed(1, 1, 2), 7, 8)}, porcupine.Ok},
		{"unknown took effect late", []Op{at(unknown(0, 1), 0, 1), at(read(1, 1), 5, 6), at(read(1, 2), 7, 8)}, porcupine.Ok},
		{"a version twice", []Op{at(committed(0, 1, 2), 0, 1), at(committed(1, 1, 2), 2, 3)}, porcupine.Illegal},
		{"a version skipped", []Op{at(committed(0, 1, 3), 0, 1)}, porcupine.Illegal},
		{"stale read after a commit returned", []Op{at(committed(0, 1, 2), 0, 1), at(read(1, 1), 2, 3)}, porcupine.Illegal},
		{"read of a version not yet committed", []Op{at(read(1, 2), 0, 1), at(committed(0, 1, 2), 2, 3)}, porcupine.Illegal},
		{"versions in the reverse order of the calls", []Op{at(committed(0, 1, 3), 0, 1), at(committed(1, 1, 2), 2, 3)}, porcupine.Illegal},
		{"read at a version above the head", []Op{at(committed(0, 5, 2), 0, 1)}, porcupine.Illegal},
		{"unknown cannot take two versions", []Op{at(unknown(0, 1), 0, 1), at(read(1, 3), 5, 6)}, porcupine.Illegal},
	} {
		got, desc := Linearizable(tc.ops, "d", 1, 10*time.Second)
		if got != tc.want {
			t.Errorf("%s: %v, want %v (%s)", tc.name, got, tc.want, desc)
		}
		if got == porcupine.Illegal && desc == "" {
			t.Errorf("%s: illegal without a description", tc.name)
		}
	}
}
