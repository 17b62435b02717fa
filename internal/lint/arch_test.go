// Package lint holds architecture rules that run as ordinary tests: the pure
// packages stay pure, and flags stay in cmd/.
package lint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
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
	},
}

// pureModules are the only third-party module prefixes a pure package may use.
var pureModules = []string{
	"github.com/RoaringBitmap/roaring/v2",
	"google.golang.org/protobuf/",
}

// pureOwn are the project packages a pure package may import.
var pureOwn = map[string][]string{
	"evaluator":       {"cellguard/table", "cellguard/proto/lancepb"},
	"table":           {"cellguard/proto/lancepb", "cellguard/internal/pbwire"},
	"internal/pbwire": nil,
	// Scenario scripts' transactions: built from text, nothing else.
	"internal/txnscript": {"cellguard/evaluator", "cellguard/proto/lancepb"},
}

func TestPurePackages(t *testing.T) {
	root := repoRoot(t)
	for pkg, own := range pureOwn {
		t.Run(pkg, func(t *testing.T) {
			imports, goStmts := scanPackage(t, filepath.Join(root, pkg), false)
			if len(imports) == 0 {
				t.Skipf("package %s has no source yet", pkg)
			}
			for _, imp := range imports {
				if _, ok := pureExceptions[pkg][imp]; ok {
					continue
				}
				if why := pureImportProblem(imp, own); why != "" {
					t.Errorf("%s imports %q: %s (rule: %s stays a deterministic function of its inputs)", pkg, imp, why, pkg)
				}
			}
			for _, pos := range goStmts {
				t.Errorf("%s starts a goroutine at %s (rule: pure packages never start goroutines)", pkg, pos)
			}
		})
	}
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
// packages it must not import: the two SDKs stay independent (what they
// share lives in rejection), rejection depends on nothing but the decision
// record, and the committer sees the data plane through an interface.
var sdkForbidden = map[string][]string{
	"events":    {"cellguard/producer", "cellguard/committer", "cellguard/table/data"},
	"producer":  {"cellguard/events", "cellguard/committer", "cellguard/table/data"},
	"rejection": {"cellguard/producer", "cellguard/events", "cellguard/table", "cellguard/internal/declog"},
	// The committer reaches data files only through its injected
	// DataPlane (internal/dataplane by default), and never publishes.
	"committer": {"cellguard/table/data", "cellguard/internal/publish"},
}

func TestSDKImports(t *testing.T) {
	root := repoRoot(t)
	for pkg, forbidden := range sdkForbidden {
		imports, _ := scanPackage(t, filepath.Join(root, pkg), false)
		if len(imports) == 0 {
			t.Errorf("package %s has no imports: has it moved?", pkg)
		}
		for _, imp := range imports {
			for _, bad := range forbidden {
				if imp == bad {
					t.Errorf("%s imports %s (rule: see sdkForbidden)", pkg, imp)
				}
			}
		}
	}
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
