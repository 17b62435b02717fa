package publish_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"cellguard/committer"
	"cellguard/internal/lancedbtest"
	"cellguard/lancefile"
	"cellguard/producer"
	"cellguard/proto/cellguardpb"
	"cellguard/table/data"
)

// TestLanceDBReadsOverlays is the measurement that decides whether a
// dataset may serve LanceDB 0.39 (Lance 12) readers data overlays: a
// dataset published for cellguard readers (which may commit DataOverlay)
// gets two overlays on fragment 0 — the second overriding a cell of the
// first — and an append; each judge reads every version. A judge either
// refuses the table for reader flag 64 or reads every overlaid value
// right; never a stale value. Both judges refuse it, so DataOverlay stays
// refused on datasets published for LanceDB readers.
func TestLanceDBReadsOverlays(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, judge lancedbtest.Version) {
		ctx := context.Background()
		root := t.TempDir()
		loc := filepath.Join(root, "t.lance")
		e := newEnv(t, committer.Config{})
		pm := e.runManager(t)
		store, err := data.Open(ctx, loc)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		m := &model{rows: map[int64]*row{}}
		want := map[uint64][]map[string]any{}
		fields, err := lancefile.Fields(arrow.NewSchema([]arrow.Field{idField, xField, vecField}, nil), []int32{0, 1, 2})
		if err != nil {
			t.Fatal(err)
		}
		v := e.commit(t, withConfig(t, producer.Create("t", fields, base(t, loc, m, span(0, 10))),
			&cellguardpb.DatasetConfig{Location: loc, Readers: cellguardpb.Readers_READERS_CELLGUARD}))
		want[v] = m.want(t)
		for _, cells := range []map[uint32]float64{{1: 100.5, 4: 400.5}, {4: -4.25, 7: 700.5}} {
			snap := e.latest(t, "t")
			frag, _ := snap.Manifest().Fragment(0)
			var offs []uint32
			var vals []float64
			for o, x := range cells {
				offs = append(offs, o)
				vals = append(vals, x)
				m.rows[int64(o)].x = x
			}
			ov, err := store.WriteOverlay(ctx, snap.Manifest().Schema(), frag, map[int32]data.Cells{1: {Offsets: offs, Values: float64Col(vals)}})
			if err != nil {
				t.Fatal(err)
			}
			v = e.commit(t, snap.NewTxn().Overlay(0, ov))
			want[v] = m.want(t)
		}
		snap := e.latest(t, "t")
		v = e.commit(t, snap.NewTxn().Append(base(t, loc, m, span(10, 3))))
		want[v] = m.want(t)
		waitPublished(t, pm, "t", v)

		var out struct {
			Versions []uint64 `json:"versions"`
			At       map[string]struct {
				Count int              `json:"count"`
				Rows  []map[string]any `json:"rows"`
			} `json:"at"`
		}
		stdout, err := judge.RunErr(t, lancedbtest.Prelude+readVersionsJS, map[string]any{"dir": root, "table": "t", "maxRows": 1000})
		if se := (*lancedbtest.ScriptError)(nil); errors.As(err, &se) {
			err = fmt.Errorf("%s", lastLine(se.Stderr))
		}
		if err != nil {
			// Measured with both judges: "This dataset cannot be read by
			// this version of Lance. Please upgrade Lance to read this
			// dataset. Flags: 64" (Lance 12.0.0 knows the overlay fields
			// but does not read them).
			t.Logf("LanceDB %s refuses the table: %v", judge.LanceDB, err)
			if !strings.Contains(err.Error(), "Flags: 64") {
				t.Errorf("LanceDB %s failed on the overlaid table for another reason than reader flag 64: %v", judge.LanceDB, err)
			}
			return
		}
		t.Logf("LanceDB %s reads a table with data overlays: readers lance12 may allow DataOverlay if every value is right", judge.LanceDB)
		if err := json.Unmarshal(stdout, &out); err != nil {
			t.Fatal(err)
		}
		for ver, rows := range want {
			got := out.At[fmt.Sprint(ver)]
			same := reflect.DeepEqual(got.Rows, rows)
			t.Logf("LanceDB %s, version %d: %d rows, overlaid values read: %v", judge.LanceDB, ver, got.Count, same)
			if !same {
				t.Errorf("LanceDB %s reads version %d as %v, want %v", judge.LanceDB, ver, got.Rows, rows)
			}
		}
	})
}

// lastLine is the last non-empty line of s that is not Node's own
// trailer, where LanceDB's error is.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" && !strings.HasPrefix(l, "Node.js") && l != "}" && !strings.HasPrefix(l, "code:") {
			return l
		}
	}
	return s
}
