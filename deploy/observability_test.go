package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

var metricRE = regexp.MustCompile(`cellguard_[a-z_]+`)

// exported returns the metric names the code registers: the committer's
// name constants, the owner gauge and cellguard_build_info.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, f := range []string{"../committer/metrics.go", "../committer/ownership.go", "../cmd/cellguard/buildinfo.go", "../internal/embedded/sync.go", "../internal/publish/metrics.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`"(cellguard_[a-z_]+)"`).FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
	}
	return names
}

// known reports whether a name in a query is an exported metric or one
// of its histogram series.
func known(names map[string]bool, n string) bool {
	for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(n, suffix); ok && names[base] {
			return true
		}
	}
	return false
}

// The dashboard and the alert rules query only metrics the code exports,
// and the dashboard has a dataset variable and the rejection rate by
// reason per dataset.
func TestDashboardAndRulesUseExportedMetrics(t *testing.T) {
	names := exported(t)
	b, err := os.ReadFile("grafana/cellguard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Templating struct{ List []struct{ Name string } }
		Panels     []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	if len(dash.Templating.List) == 0 || dash.Templating.List[0].Name != "dataset" {
		t.Error("dashboard has no dataset variable")
	}
	byReason := false
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, n := range metricRE.FindAllString(tg.Expr, -1) {
				if !known(names, n) {
					t.Errorf("panel %q queries %s, which nothing exports", p.Title, n)
				}
			}
			byReason = byReason || strings.Contains(tg.Expr, "by (dataset, reason)") && strings.Contains(tg.Expr, `$dataset`)
		}
	}
	if !byReason {
		t.Error("dashboard has no rejection rate by reason per dataset")
	}
	rules, err := os.ReadFile("alerts/cellguard.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range metricRE.FindAllString(string(rules), -1) {
		if !known(names, n) && !strings.HasPrefix(n, "Cellguard") {
			t.Errorf("alert rules query %s, which nothing exports", n)
		}
	}
}
