// Package lancedbtest runs real LanceDB (the `@lancedb/lancedb` npm package,
// pinned by the package.json and package-lock.json beside this file) from Go
// tests, so that Lance itself judges whether what cellguard writes is Lance
// and whether cellguard reads what Lance writes.
//
// The first Run in a machine installs the pinned packages with `npm ci` into
// a cache directory keyed by the lock file's hash
// (os.UserCacheDir()/cellguard/lancedb-<hash>, or $CELLGUARD_LANCEDB_DIR if
// set). Later runs, in this or any other test process, reuse it. The install
// goes into a temporary sibling directory that is renamed into place when
// complete, so two test processes racing to install never see half an
// install.
//
// Node 20 or newer and npm must be on PATH. Without them the test fails
// (never skips) and says how to install Node.
//
// A script is the source of an ES module. It reads its input as JSON from
// stdin and writes its result as JSON to stdout; whatever it writes to
// stderr is shown when it fails:
//
//	const input = JSON.parse(await readStdin());
//	const db = await lancedb.connect(input.dir);
//	...
//	process.stdout.write(JSON.stringify(result));
//
// ReadStdin in Prelude is a helper scripts can use (callers prepend
// Prelude).
package lancedbtest

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// LanceDBVersion is the pinned version of @lancedb/lancedb (Lance 8.0.0).
const LanceDBVersion = "0.31.0"

//go:embed package.json
var packageJSON []byte

//go:embed package-lock.json
var packageLock []byte

// Prelude is JavaScript that scripts may start with: it imports lancedb and
// apache-arrow and defines readStdin().
const Prelude = `import * as lancedb from "@lancedb/lancedb";
import * as arrow from "apache-arrow";
async function readStdin() {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  return Buffer.concat(chunks).toString("utf8");
}
`

const installHelp = "lancedbtest: real LanceDB is the judge of Lance compatibility and needs Node.js 20+ with npm on PATH. " +
	"Install Node 20, e.g. `curl -fsSL https://deb.nodesource.com/setup_20.x | sudo bash - && sudo apt-get install -y nodejs` " +
	"(Debian/Ubuntu), `brew install node@20` (macOS), or from https://nodejs.org/"

var (
	installOnce sync.Once
	installDir  string
	installErr  error
)

// Dir returns the directory holding node_modules with the pinned LanceDB,
// installing it first if needed. It fails the test if Node or npm is
// missing or the install fails.
func Dir(t testing.TB) string {
	t.Helper()
	installOnce.Do(func() { installDir, installErr = install() })
	if installErr != nil {
		t.Fatal(installErr)
	}
	return installDir
}

// Run runs script, the source of an ES module, with Node in a fresh
// temporary directory that resolves `@lancedb/lancedb` and `apache-arrow`
// to the pinned install. input is marshalled to JSON on the script's stdin
// (nil sends `null`); the script's stdout is unmarshalled into out unless
// out is nil. A non-zero exit, or stdout that is not JSON, fails the test
// with the script's stderr.
func Run(t testing.TB, script string, input, out any) {
	t.Helper()
	stdout, err := RunErr(t, script, input)
	if err != nil {
		t.Fatal(err)
	}
	if out == nil {
		return
	}
	if err := json.Unmarshal(stdout, out); err != nil {
		t.Fatalf("lancedbtest: decode script output: %v\nstdout: %s", err, truncate(stdout))
	}
}

// RunErr is Run without decoding: it returns the script's stdout, or an
// error carrying its stderr when it exits non-zero. Use it when a test
// expects LanceDB to refuse something.
func RunErr(t testing.TB, script string, input any) ([]byte, error) {
	t.Helper()
	dir := Dir(t)
	work := t.TempDir()
	if err := os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(work, "node_modules")); err != nil {
		t.Fatalf("lancedbtest: link node_modules: %v", err)
	}
	path := filepath.Join(work, "script.mjs")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatalf("lancedbtest: write script: %v", err)
	}
	in, err := json.Marshal(input)
	if err != nil {
		t.Fatalf("lancedbtest: encode input: %v", err)
	}
	cmd := exec.Command("node", path)
	cmd.Dir = work
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), &ScriptError{Err: err, Stderr: stderr.String()}
	}
	return stdout.Bytes(), nil
}

// ScriptError is a script that exited unsuccessfully.
type ScriptError struct {
	Err    error
	Stderr string
}

func (e *ScriptError) Error() string {
	return fmt.Sprintf("lancedbtest: node script failed: %v\nstderr:\n%s", e.Err, truncate([]byte(e.Stderr)))
}

func (e *ScriptError) Unwrap() error { return e.Err }

func truncate(b []byte) string {
	const max = 8 << 10
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}

// install makes sure the pinned packages are installed and returns their
// directory.
func install() (string, error) {
	if err := checkNode(); err != nil {
		return "", err
	}
	root, err := cacheRoot()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(append(append([]byte{}, packageJSON...), packageLock...))
	dir := filepath.Join(root, "lancedb-"+hex.EncodeToString(sum[:8]))
	if installed(dir) {
		return dir, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("lancedbtest: %w", err)
	}
	tmp, err := os.MkdirTemp(root, ".lancedb-install-")
	if err != nil {
		return "", fmt.Errorf("lancedbtest: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if err := npmCI(tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil && !installed(dir) {
		return "", fmt.Errorf("lancedbtest: move install into place: %w", err)
	}
	return dir, nil
}

func cacheRoot() (string, error) {
	if d := os.Getenv("CELLGUARD_LANCEDB_DIR"); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("lancedbtest: no cache directory (set CELLGUARD_LANCEDB_DIR): %w", err)
	}
	return filepath.Join(base, "cellguard"), nil
}

// installed reports whether dir holds a complete install. A directory only
// ever appears under its final name after npm ci succeeded.
func installed(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "node_modules", "@lancedb", "lancedb", "package.json"))
	return err == nil
}

func npmCI(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "package.json"), packageJSON, 0o644); err != nil {
		return fmt.Errorf("lancedbtest: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "package-lock.json"), packageLock, 0o644); err != nil {
		return fmt.Errorf("lancedbtest: %w", err)
	}
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("lancedbtest: npm ci (@lancedb/lancedb %s) failed: %v\n%s", LanceDBVersion, err, truncate(out))
	}
	return nil
}

// checkNode fails unless node (version 20 or newer) and npm are on PATH.
func checkNode() error {
	if _, err := exec.LookPath("npm"); err != nil {
		return errors.New(installHelp + " (npm not found)")
	}
	if _, err := exec.LookPath("node"); err != nil {
		return errors.New(installHelp + " (node not found)")
	}
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		return fmt.Errorf("%s (node --version: %v)", installHelp, err)
	}
	v := strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
	var major int
	if _, err := fmt.Sscanf(v, "%d", &major); err != nil || major < 20 {
		return fmt.Errorf("%s (found node %s)", installHelp, strings.TrimSpace(string(out)))
	}
	return nil
}
