// Package lint holds architecture rules that run as ordinary tests: the pure
// packages stay pure, and flags stay in cmd/.
package lint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "cellguard"

// pureForbidden are standard-library imports that would let a pure package
// see the clock, the file system, the network, logs or shared-memory
// concurrency.
var pureForbidden = map[string]bool{
	"time": true, "os": true, "os/exec": true, "sync": true, "sync/atomic": true,
	"net": true, "net/http": true, "log": true, "log/slog": true, "math/rand": true,
	"math/rand/v2": true, "crypto/rand": true, "io/fs": true, "runtime": true,
}

// pureExceptions are forbidden imports a pure package may use anyway,
// each for the reason given.
var pureExceptions = map[string]map[string]string{
	"table": {
		// The tail buffer of a persistent map (table/intmap_tail.go) is
		// shared by versions; of two versions branched from one, possibly
		// on different goroutines, only the one that claims the next
		// entry (compare-and-swap) writes it in place, the other copies.
		// Either way every version holds the same entries: the results
		// stay a function of the inputs, only the sharing differs.
		"sync/atomic": "the tail buffer's claim",
		// A packed manifest (table/packed.go) decodes its fragments the
		// first time any goroutine reads them, once (sync.Once): every
		// reader sees the same fragments, decoded from the same bytes.
		// The set of schemas in use (table/schema.go) is locked: a
		// schema built from fields equal to one in use is that one, so
		// only the sharing depends on other callers, never a result.
		// Decoders not in use wait in a pool (table/decoder.go), zeroed:
		// which one a caller gets changes no decode.
		"sync": "a packed manifest's one decode; the set of schemas in use; the pool of decoders",
	},
	// Generated messages: protoimpl's lazily built descriptors (a
	// sync.Once per file), the same for every run.
	"proto/lancepb":     {"sync": "generated descriptors"},
	"proto/cellguardpb": {"sync": "generated descriptors"},
	"internal/logrec": {
		// Record.Time carries when the log stored a record, a value read
		// from the log; the package never reads the clock.
		"time": "the type of Record.Time",
	},
}

// pureModules are the only third-party module prefixes a pure package may use.
var pureModules = []string{
	"github.com/RoaringBitmap/roaring/v2",
	"google.golang.org/protobuf/",
	// zstd compresses a quiet head's packed fragments in memory
	// (table/packed.go): EncodeAll and DecodeAll, synchronous, on bytes
	// no decision or output depends on but through their decoding.
	"github.com/klauspost/compress/zstd",
}

// pureOwn are the project packages a pure package may import.
var pureOwn = map[string][]string{
	"evaluator":        {"cellguard/table", "cellguard/proto/lancepb"},
	"table":            {"cellguard/proto/lancepb", "cellguard/internal/pbwire"},
	"internal/pbwire":  nil,
	"internal/subject": nil,
	// The decision log's records as values, below declog and the core.
	"internal/logrec": {"cellguard/internal/pbwire", "cellguard/internal/subject", "cellguard/proto/cellguardpb",
		"cellguard/proto/lancepb", "cellguard/table"},
	// The decision core: the state and every rule that decides.
	"committer/decide": {"cellguard/evaluator", "cellguard/internal/logrec", "cellguard/internal/subject",
		"cellguard/proto/cellguardpb", "cellguard/proto/lancepb", "cellguard/table"},
	// Generated messages.
	"proto/lancepb":     nil,
	"proto/cellguardpb": nil,
	// Scenario scripts' transactions: built from text, nothing else.
	"internal/txnscript": {"cellguard/evaluator", "cellguard/proto/lancepb"},
}

func TestPurePackages(t *testing.T) {
	g := projectGraph(t)
	for pkg := range pureOwn {
		t.Run(pkg, func(t *testing.T) {
			if _, ok := g.imports[module+"/"+pkg]; !ok {
				t.Skipf("package %s has no source yet", pkg)
			}
			for _, p := range pureProblems(g, pkg) {
				t.Errorf("%s (rule: %s stays a deterministic function of its inputs, and so does all it reaches)", p, pkg)
			}
		})
	}
}

// pureProblems checks pure package pkg and every project package it
// reaches: each must itself be pure (in pureOwn), import only what its
// entry allows, and start no goroutine. A problem names the import path
// from pkg.
func pureProblems(g graph, pkg string) []string {
	var out []string
	for _, r := range g.reach(module + "/" + pkg) {
		q := strings.TrimPrefix(r.pkg, module+"/")
		own, pure := pureOwn[q]
		if !pure {
			out = append(out, fmt.Sprintf("%s reaches %s, which is not a pure package", pkg, r.path()))
			continue
		}
		for _, imp := range g.imports[r.pkg] {
			if _, ok := pureExceptions[q][imp]; ok {
				continue
			}
			if why := pureImportProblem(imp, own); why != "" {
				out = append(out, fmt.Sprintf("%s imports %q: %s", r.path(), imp, why))
			}
		}
		for _, pos := range g.goStmts[r.pkg] {
			out = append(out, fmt.Sprintf("%s starts a goroutine at %s", r.path(), pos))
		}
	}
	return out
}

func pureImportProblem(imp string, own []string) string {
	switch {
	case pureForbidden[imp]:
		return "forbidden in pure packages"
	case strings.HasPrefix(imp, module+"/"):
		for _, ok := range own {
			if imp == ok {
				return ""
			}
		}
		return "not an allowed project package"
	case !strings.Contains(strings.SplitN(imp, "/", 2)[0], "."):
		return "" // other standard library
	}
	for _, prefix := range pureModules {
		if strings.HasPrefix(imp, prefix) || imp+"/" == prefix {
			return ""
		}
	}
	return "third-party module not allowed in pure packages"
}

// sdkForbidden lists, for each SDK package (and the committer), project
// packages it must not reach through any path: the two SDKs stay
// independent (what they share lives in rejection), rejection depends on
// nothing but the decision record, and the committer (the server) never
// links the worker SDK or publishes.
var sdkForbidden = map[string][]string{
	"events":    {"cellguard/producer", "cellguard/committer", "cellguard/table/data"},
	"producer":  {"cellguard/events", "cellguard/committer", "cellguard/table/data"},
	"rejection": {"cellguard/producer", "cellguard/events", "cellguard/table", "cellguard/internal/declog"},
	"committer": {"cellguard/internal/publish", "cellguard/producer", "cellguard/events"},
}

// directForbidden lists imports a package must not make itself, though
// it may reach them through another: the committer reads data files only
// through its injected DataPlane (internal/dataplane by default).
var directForbidden = map[string][]string{
	"committer": {"cellguard/table/data"},
}

func TestSDKImports(t *testing.T) {
	g := projectGraph(t)
	for pkg, forbidden := range sdkForbidden {
		if len(g.imports[module+"/"+pkg]) == 0 {
			t.Errorf("package %s has no imports: has it moved?", pkg)
		}
		for _, p := range reachProblems(g, pkg, forbidden) {
			t.Errorf("%s (rule: see sdkForbidden)", p)
		}
	}
	for pkg, forbidden := range directForbidden {
		for _, imp := range g.imports[module+"/"+pkg] {
			if slices.Contains(forbidden, imp) {
				t.Errorf("%s imports %s (rule: see directForbidden)", pkg, imp)
			}
		}
	}
}

// reachProblems names each forbidden package pkg reaches, with the path.
func reachProblems(g graph, pkg string, forbidden []string) []string {
	var out []string
	for _, r := range g.reach(module + "/" + pkg) {
		if slices.Contains(forbidden, r.pkg) {
			out = append(out, fmt.Sprintf("%s reaches %s", pkg, r.path()))
		}
	}
	return out
}

// lowerLayers are the packages below the SDKs and the server: no arrow
// from them runs up to a package of upperLayers. The application
// packages sit above everything but cmd/: they may import the SDKs and
// the committer, and only cmd/ imports them.
var (
	lowerLayers = []string{"internal/", "table", "evaluator", "lancefile", "rejection", "proto/"}
	upperLayers = []string{"cellguard/producer", "cellguard/events", "cellguard/committer", "cellguard/cmd/",
		"cellguard/internal/bench", "cellguard/internal/demo", "cellguard/internal/nsbench"}
	appLayers = []string{"internal/bench", "internal/demo", "internal/nsbench"}
)

func TestNoUpwardArrow(t *testing.T) {
	g := projectGraph(t)
	for _, p := range upwardProblems(g) {
		t.Errorf("%s (rule: packages below the SDKs and the server never reach them)", p)
	}
}

func upwardProblems(g graph) []string {
	var out []string
	for _, pkg := range g.packages() {
		rel := strings.TrimPrefix(pkg, module+"/")
		if !hasAnyPrefix(rel, lowerLayers) || hasAnyPrefix(rel, appLayers) {
			continue
		}
		for _, r := range g.reach(pkg) {
			if r.pkg != pkg && hasAnyPrefix(r.pkg, upperLayers) {
				out = append(out, fmt.Sprintf("%s reaches %s", rel, r.path()))
			}
		}
	}
	return out
}

func TestOnlyCmdImportsApplications(t *testing.T) {
	g := projectGraph(t)
	for _, p := range applicationImporters(g) {
		t.Errorf("%s (rule: only cmd/ imports an application package)", p)
	}
}

// applicationImporters names each package outside cmd/ that imports an
// application package (appLayers).
func applicationImporters(g graph) []string {
	var out []string
	for _, pkg := range g.packages() {
		rel := strings.TrimPrefix(pkg, module+"/")
		if strings.HasPrefix(rel, "cmd/") {
			continue
		}
		for _, imp := range g.imports[pkg] {
			if app, ok := strings.CutPrefix(imp, module+"/"); ok && hasAnyPrefix(app, appLayers) {
				out = append(out, fmt.Sprintf("%s imports %s", rel, app))
			}
		}
	}
	return out
}

// hasAnyPrefix reports whether package s is one of prefixes or below one
// ("internal/bench" is not below "internal/ben").
func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if s == strings.TrimSuffix(p, "/") || strings.HasPrefix(s, strings.TrimSuffix(p, "/")+"/") {
			return true
		}
	}
	return false
}

// graph is the project's import graph: for each project package, its
// non-test imports (sorted) and the positions of its go statements.
type graph struct {
	imports map[string][]string
	goStmts map[string][]string
}

// reached is a package reached from another, with the path to it.
type reached struct {
	pkg string
	via []string // from the start to pkg, both included
}

func (r reached) path() string {
	short := make([]string, len(r.via))
	for i, p := range r.via {
		short[i] = strings.TrimPrefix(p, module+"/")
	}
	return strings.Join(short, " → ")
}

// reach returns every project package reachable from pkg (pkg first),
// each with a shortest path, in breadth-first order.
func (g graph) reach(pkg string) []reached {
	seen := map[string]bool{pkg: true}
	out := []reached{{pkg: pkg, via: []string{pkg}}}
	for i := 0; i < len(out); i++ {
		for _, imp := range g.imports[out[i].pkg] {
			if seen[imp] || !strings.HasPrefix(imp, module+"/") {
				continue
			}
			seen[imp] = true
			out = append(out, reached{pkg: imp, via: append(slices.Clone(out[i].via), imp)})
		}
	}
	return out
}

func (g graph) packages() []string {
	out := make([]string, 0, len(g.imports))
	for p := range g.imports {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// projectGraph scans every package directory of the repository.
func projectGraph(t *testing.T) graph {
	t.Helper()
	root := repoRoot(t)
	g := graph{imports: map[string][]string{}, goStmts: map[string][]string{}}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, path)
		imports, goStmts := scanPackage(t, path, false)
		if !hasGoFiles(t, path) {
			return nil
		}
		pkg := module
		if rel != "." {
			pkg += "/" + filepath.ToSlash(rel)
		}
		g.imports[pkg], g.goStmts[pkg] = imports, goStmts
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func hasGoFiles(t *testing.T, dir string) bool {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".go") && !strings.HasSuffix(e.Name(), "_test.go") {
			return true
		}
	}
	return false
}

func TestFlagOnlyInCmd(t *testing.T) {
	root := repoRoot(t)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "cmd" || strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if strings.Trim(imp.Path.Value, `"`) == "flag" {
				t.Errorf("%s imports flag (rule: only cmd/ reads flags)", rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// scanPackage returns the sorted imports of the non-test Go files in dir and
// the positions of any go statements.
func scanPackage(t *testing.T, dir string, tests bool) ([]string, []string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var goStmts []string
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || (!tests && strings.HasSuffix(name, "_test.go")) {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			seen[strings.Trim(imp.Path.Value, `"`)] = true
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if g, ok := n.(*ast.GoStmt); ok {
				goStmts = append(goStmts, fset.Position(g.Pos()).String())
			}
			return true
		})
	}
	imports := make([]string, 0, len(seen))
	for imp := range seen {
		imports = append(imports, imp)
	}
	sort.Strings(imports)
	return imports, goStmts
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found")
		}
		dir = parent
	}
}

func TestPureImportProblem(t *testing.T) {
	own := pureOwn["evaluator"]
	for imp, bad := range map[string]bool{
		"time": true, "log/slog": true, "sync": true,
		"github.com/nats-io/nats.go": true, "github.com/prometheus/client_golang/prometheus": true,
		"cellguard/committer": true,
		"strings":             false, "cellguard/table": false, "github.com/RoaringBitmap/roaring/v2": false,
	} {
		if got := pureImportProblem(imp, own) != ""; got != bad {
			t.Errorf("pureImportProblem(%q) flagged = %v, want %v", imp, got, bad)
		}
	}
}

// TestCheckersReportViolations runs the checkers over a small synthetic
// graph with the arrows this lint exists to refuse: a server reaching
// the worker SDK through two internal packages, a low package reaching
// up, a pure package reaching, through a pure one, a package that reads
// the clock, and an application imported from outside cmd/. Each must be
// reported with its path.
func TestCheckersReportViolations(t *testing.T) {
	m := func(p string) string { return module + "/" + p }
	g := graph{imports: map[string][]string{
		m("committer"):          {m("internal/dataplane"), "context"},
		m("internal/dataplane"): {m("internal/publish")},
		m("internal/publish"):   {m("producer")},
		m("producer"):           {m("internal/subject")},
		m("internal/subject"):   {"strings"},
		m("evaluator"):          {m("table"), m("proto/lancepb")},
		m("table"):              {m("internal/pbwire"), m("proto/lancepb")},
		m("internal/pbwire"):    {m("internal/clock")},
		m("internal/clock"):     {"time"},
		m("proto/lancepb"):      nil,
		m("internal/bench"):     {m("committer"), m("producer")},
		m("internal/demo"):      {m("internal/bench"), m("events")},
		m("cmd/cellguard"):      {m("internal/bench"), m("internal/demo")},
	}, goStmts: map[string][]string{}}

	got := reachProblems(g, "committer", sdkForbidden["committer"])
	want := "committer reaches committer → internal/dataplane → internal/publish → producer"
	if !slices.Contains(got, want) {
		t.Errorf("reachProblems = %q; want it to contain %q", got, want)
	}
	if got := upwardProblems(g); !slices.Contains(got, "internal/dataplane reaches internal/dataplane → internal/publish → producer") {
		t.Errorf("upwardProblems = %q; want the arrow from internal/dataplane up to producer", got)
	}
	got = pureProblems(g, "evaluator")
	want = "evaluator reaches evaluator → table → internal/pbwire → internal/clock, which is not a pure package"
	if !slices.Contains(got, want) {
		t.Errorf("pureProblems = %q; want it to contain %q", got, want)
	}
	if got := applicationImporters(g); !slices.Equal(got, []string{"internal/demo imports internal/bench"}) {
		t.Errorf("applicationImporters = %q; want only internal/demo importing internal/bench", got)
	}
	// Without the upward arrows, nothing is reported.
	g.imports[m("internal/dataplane")] = nil
	g.imports[m("internal/publish")] = nil
	g.imports[m("internal/pbwire")] = nil
	g.imports[m("internal/demo")] = []string{m("events")}
	if got := append(reachProblems(g, "committer", sdkForbidden["committer"]), append(upwardProblems(g), append(pureProblems(g, "evaluator"), applicationImporters(g)...)...)...); len(got) > 0 {
		t.Errorf("clean graph reported %q", got)
	}
}
