package namespace_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"cellguard/table"
)

// proxy sits between LanceDB and the namespace and lets a test change
// what passes: onCreate sees each version/create request body (and may
// change it, or the staged manifest it names, before it is forwarded);
// onAnswer may replace the namespace's answer to it.
type proxy struct {
	t      *testing.T
	target *httputil.ReverseProxy
	url    string

	mu       sync.Mutex
	onCreate func(req map[string]any) map[string]any
	onAnswer func(status int, body []byte) (int, []byte)
	answers  []answer // every version/create answer the namespace gave
}

type answer struct {
	req    map[string]any
	status int
	body   []byte
}

func newProxy(t *testing.T, nsURL string) *proxy {
	u, err := url.Parse(nsURL)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, target: httputil.NewSingleHostReverseProxy(u)}
	hs := httptest.NewServer(p)
	t.Cleanup(hs.Close)
	p.url = hs.URL
	return p
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/version/create") {
		p.target.ServeHTTP(w, r)
		return
	}
	b, _ := io.ReadAll(r.Body)
	var req map[string]any
	_ = json.Unmarshal(b, &req)
	p.mu.Lock()
	onCreate, onAnswer := p.onCreate, p.onAnswer
	p.mu.Unlock()
	if onCreate != nil && req != nil {
		req = onCreate(req)
		b, _ = json.Marshal(req)
	}
	rec := httptest.NewRecorder()
	r2 := r.Clone(r.Context())
	r2.Body, r2.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	p.target.ServeHTTP(rec, r2)
	status, body := rec.Code, rec.Body.Bytes()
	p.mu.Lock()
	p.answers = append(p.answers, answer{req: req, status: status, body: body})
	p.mu.Unlock()
	if onAnswer != nil {
		status, body = onAnswer(status, body)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (p *proxy) seen() []answer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]answer(nil), p.answers...)
}

// tamperManifest rewrites the staged manifest a version/create names
// (a local path) with change, and fixes manifest_size in the request.
func tamperManifest(t *testing.T, req map[string]any, change func(*table.ManifestFile)) map[string]any {
	path := "/" + req["manifest_path"].(string)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("tamper: %v", err)
		return req
	}
	f, err := table.ReadManifestFile(b)
	if err != nil {
		t.Errorf("tamper: %v", err)
		return req
	}
	change(f)
	if b, err = table.WriteManifestFile(f); err != nil {
		t.Errorf("tamper: %v", err)
		return req
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Errorf("tamper: %v", err)
	}
	req["manifest_size"] = len(b)
	return req
}
