package namespace_test

import (
	_ "embed"
	"fmt"
	"strings"
	"testing"

	"cellguard/internal/lancedbtest"
	"cellguard/internal/namespace"
)

//go:embed testdata/steps.mjs
var stepsJS string

type stepsOut struct {
	Steps []struct {
		Op     string `json:"op"`
		OK     bool   `json:"ok"`
		Error  string `json:"error"`
		Count  *int   `json:"count"`
		Schema string `json:"schema"`
		Result any    `json:"result"`
	} `json:"steps"`
}

// TestLanceDBSteps runs a LanceDB user's everyday steps (steps.mjs) on a
// local directory and through the namespace, with each judge. Every step,
// the four index builds included, gives the same outcome, row count and
// schema both ways. The table the test logs is the comparison, step by
// step.
func TestLanceDBSteps(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
		var local, ns stepsOut
		v.Run(t, lancedbtest.Prelude+stepsJS, map[string]any{"dir": t.TempDir(), "table": "s"}, &local)
		tokens, err := namespace.ParseTokens([]byte(dropTokens))
		if err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, envOptions{tokens: tokens, admin: true})
		v.Run(t, lancedbtest.Prelude+stepsJS, map[string]any{"uri": e.url, "headers": bearer("atok"), "table": "s", "stepMs": 8000}, &ns)
		if len(local.Steps) != len(ns.Steps) {
			t.Fatalf("%d local steps, %d through the namespace", len(local.Steps), len(ns.Steps))
		}
		var tbl strings.Builder
		fmt.Fprintf(&tbl, "LanceDB %s: step | local | through cellguard\n", v.LanceDB)
		passed := [2]int{}
		for i, l := range local.Steps {
			n := ns.Steps[i]
			show := func(s string, ok bool, count *int) string {
				c := "-"
				if count != nil {
					c = fmt.Sprint(*count)
				}
				if ok {
					return "ok (" + c + " rows)"
				}
				if len(s) > 160 {
					s = s[:160] + "…"
				}
				return "FAILED " + s
			}
			if l.OK {
				passed[0]++
			}
			if n.OK {
				passed[1]++
			}
			fmt.Fprintf(&tbl, "%2d %-16s | %s | %s\n", i+1, l.Op, show(l.Error, l.OK, l.Count), show(n.Error, n.OK, n.Count))
			if !l.OK {
				t.Errorf("step %s failed on a local directory: %s", l.Op, l.Error)
			}
			if !n.OK {
				t.Errorf("step %s failed through the namespace: %s", n.Op, n.Error)
				continue
			}
			if fmt.Sprint(l.Count) != fmt.Sprint(n.Count) && (l.Count == nil || n.Count == nil || *l.Count != *n.Count) {
				t.Errorf("step %s: %v rows through the namespace, %v locally", l.Op, n.Count, l.Count)
			}
			if l.Schema != n.Schema {
				t.Errorf("step %s: schema %q through the namespace, %q locally", l.Op, n.Schema, l.Schema)
			}
		}
		fmt.Fprintf(&tbl, "passed: local %d/%d, through cellguard %d/%d", passed[0], len(local.Steps), passed[1], len(ns.Steps))
		t.Log("\n" + tbl.String())
	})
}
