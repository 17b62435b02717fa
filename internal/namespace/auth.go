package namespace

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"

	"cellguard/internal/subject"
)

// Role is what a token may do.
type Role int

const (
	// RoleReader may list, describe and read tables and versions.
	RoleReader Role = iota + 1
	// RoleWorker may also declare tables and commit versions.
	RoleWorker
	// RoleAdmin may also drop created tables (docs/design.md §9.3).
	RoleAdmin
)

func (r Role) String() string {
	switch r {
	case RoleReader:
		return "reader"
	case RoleWorker:
		return "worker"
	case RoleAdmin:
		return "admin"
	}
	return fmt.Sprintf("role(%d)", int(r))
}

// ErrTokens reports a malformed tokens file.
var ErrTokens = errors.New("namespace: bad tokens file")

// Tokens maps bearer tokens to a role over some datasets. Tokens are kept
// only as SHA-256 digests and never logged.
type Tokens struct {
	grants map[[32]byte]grant
}

type grant struct {
	role     Role
	datasets []string // nil: every dataset
}

// ParseTokens reads a tokens file: one grant per line,
//
//	<role> <token> <datasets>
//
// where role is `admin`, `worker` or `reader` (each may do what the
// next may, and more: an admin may drop tables), and datasets is `*` or a
// comma-separated list of dataset (table) names. Blank lines and lines
// starting with # are ignored. A token given twice is an error.
func ParseTokens(b []byte) (*Tokens, error) {
	t := &Tokens{grants: map[[32]byte]grant{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("%w: line %d: want `<role> <token> <datasets>`, got %d fields", ErrTokens, n, len(f))
		}
		var g grant
		switch f[0] {
		case "worker":
			g.role = RoleWorker
		case "reader":
			g.role = RoleReader
		case "admin":
			g.role = RoleAdmin
		default:
			return nil, fmt.Errorf("%w: line %d: role %q is not admin, worker or reader", ErrTokens, n, f[0])
		}
		if f[2] != "*" {
			for _, ds := range strings.Split(f[2], ",") {
				if err := subject.Validate(ds); err != nil {
					return nil, fmt.Errorf("%w: line %d: %v", ErrTokens, n, err)
				}
				g.datasets = append(g.datasets, ds)
			}
		}
		key := sha256.Sum256([]byte(f[1]))
		if _, dup := t.grants[key]; dup {
			return nil, fmt.Errorf("%w: line %d: token given twice", ErrTokens, n)
		}
		t.grants[key] = g
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTokens, err)
	}
	if len(t.grants) == 0 {
		return nil, fmt.Errorf("%w: no tokens", ErrTokens)
	}
	return t, nil
}

// LoadTokens reads and parses a tokens file.
func LoadTokens(path string) (*Tokens, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTokens, err)
	}
	return ParseTokens(b)
}

// token returns the request's credential: `Authorization: Bearer …`
// (the scheme in any case, RFC 7235) or `x-api-key`, the two headers the
// namespace spec names. Without one, why is what to tell the client.
func token(r *http.Request) (tok, why string) {
	a := strings.TrimSpace(r.Header.Get("Authorization"))
	scheme, rest, _ := strings.Cut(a, " ")
	bearer := strings.EqualFold(scheme, "Bearer")
	if tok = strings.TrimSpace(rest); bearer && tok != "" {
		return tok, ""
	}
	if k := r.Header.Get("X-Api-Key"); k != "" {
		return k, ""
	}
	switch {
	case a == "":
		return "", "no credentials: send Authorization: Bearer <token> or x-api-key"
	case bearer:
		return "", "empty bearer token: send Authorization: Bearer <token> or x-api-key"
	}
	return "", fmt.Sprintf("authorization scheme %q is not supported: send Authorization: Bearer <token> or x-api-key", scheme)
}

// authorize checks that the request may act as role on dataset ds ("" for
// requests that name no table). A nil Tokens allows everything.
// Missing or unknown credentials are 401 (code 16); a known token without
// the right is 403 (code 15).
func (t *Tokens) authorize(r *http.Request, need Role, ds string) *Error {
	return t.authorizeAs(r, need, ds, need.String())
}

// authorizeAs is authorize with what the refusal says the operation
// needs, for operations whose need depends on the table (drop).
func (t *Tokens) authorizeAs(r *http.Request, need Role, ds, needs string) *Error {
	if t == nil {
		return nil
	}
	tok, why := token(r)
	if tok == "" {
		return errorf(http.StatusUnauthorized, CodeUnauthenticated, "%s", why)
	}
	g, ok := t.grants[sha256.Sum256([]byte(tok))]
	if !ok {
		return errorf(http.StatusUnauthorized, CodeUnauthenticated, "unknown token")
	}
	if g.role < need {
		return &Error{Status: http.StatusForbidden, Code: CodePermissionDenied, Final: true,
			Msg: fmt.Sprintf("a %s token may not do this (needs %s)", g.role, needs)}
	}
	if ds != "" && g.datasets != nil && !slices.Contains(g.datasets, ds) {
		return &Error{Status: http.StatusForbidden, Code: CodePermissionDenied, Final: true,
			Msg: fmt.Sprintf("token has no grant on table %q", ds)}
	}
	return nil
}

// visible reports whether the request's token may see dataset ds (for
// table listings).
func (t *Tokens) visible(r *http.Request, ds string) bool {
	if t == nil {
		return true
	}
	tok, _ := token(r)
	g, ok := t.grants[sha256.Sum256([]byte(tok))]
	return ok && (g.datasets == nil || slices.Contains(g.datasets, ds))
}
