package namespace

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"cellguard/internal/publish"
	"cellguard/internal/retry"
	"cellguard/table"
)

// tableVersion is the spec's TableVersion.
type tableVersion struct {
	Version      uint64 `json:"version"`
	ManifestPath string `json:"manifest_path"`
	ManifestSize int64  `json:"manifest_size,omitempty"`
}

type versionsResponse struct {
	Versions  []tableVersion `json:"versions"`
	PageToken string         `json:"page_token,omitempty"`
}

// publishWait bounds how long a read waits for the publisher to lay out a
// committed version, so that what it answers matches the decision log.
const publishWait = 10 * time.Second

// manifestKey is the key of version v's manifest inside a location (V2
// naming, the only one cellguard publishes and adopts).
func manifestKey(v uint64) string { return "_versions/" + table.ManifestFileName(v, true) }

// published waits until version v's manifest is in storage, at most
// limit (and never past ctx). It reports whether it is there.
func (s *Server) published(ctx context.Context, loc *publish.Location, v uint64, limit time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	errMissing := fmt.Errorf("version %d not published yet", v)
	err := retry.Do(ctx, math.MaxInt, s.cfg.Poll, func(ctx context.Context) error {
		ok, err := loc.Bucket.Exists(ctx, manifestKey(v))
		if err != nil {
			return err
		}
		if !ok {
			return errMissing
		}
		return nil
	}, nil)
	if err == nil {
		return true, nil
	}
	if ctx.Err() != nil {
		return false, nil
	}
	return false, err
}

// versionEntry describes version v as stored.
func (s *Server) versionEntry(ctx context.Context, t *tableState, v uint64) (tableVersion, bool, error) {
	attrs, err := t.loc.Bucket.Attributes(ctx, manifestKey(v))
	if err != nil {
		ok, xerr := t.loc.Bucket.Exists(ctx, manifestKey(v))
		if xerr == nil && !ok {
			return tableVersion{}, false, nil
		}
		return tableVersion{}, false, err
	}
	return tableVersion{Version: v, ManifestPath: objectPath(t.locURL, manifestKey(v)), ManifestSize: attrs.Size}, true, nil
}

// listVersions lists the versions of the table that are in storage (a
// client's own cleanup removes old ones), newest first unless
// descending=false, paged by limit and page_token (the last version of
// the previous page). It first lets the publisher catch up with the
// decision log's head, so the newest committed version is listed.
func (s *Server) listVersions(ctx context.Context, r *http.Request) (any, *Error) {
	var req versionsRequest
	if e := decode(r, &req); e != nil {
		return nil, e
	}
	ds, e := tableName(r, req.ID)
	if e != nil {
		return nil, e
	}
	if e := s.cfg.Tokens.authorize(r, RoleReader, ds); e != nil {
		return nil, e
	}
	pg, e := versionPaging(r, req)
	if e != nil {
		return nil, e
	}
	limit, tok, after, desc := pg.limit, pg.token, pg.after, pg.desc
	h, exists, e := s.head(ctx, ds)
	if e != nil {
		return nil, e
	}
	if !exists {
		if _, declared := s.declaredTable(ds); !declared {
			return nil, tableNotFound(ds)
		}
		return versionsResponse{Versions: []tableVersion{}}, nil
	}
	t, e := s.location(ctx, ds, true)
	if e != nil {
		return nil, e
	}
	if _, err := s.published(ctx, t.loc, h.Version, publishWait); err != nil {
		return nil, internal(err)
	}
	vs, err := publish.Versions(ctx, t.loc)
	if err != nil {
		return nil, internal(err)
	}
	vs = slices.DeleteFunc(vs, func(v uint64) bool {
		return v > h.Version || (tok != "" && ((desc && v >= after) || (!desc && v <= after)))
	})
	if desc {
		slices.Reverse(vs)
	}
	resp := versionsResponse{Versions: []tableVersion{}}
	for _, v := range vs {
		if limit > 0 && len(resp.Versions) == limit {
			resp.PageToken = strconv.FormatUint(resp.Versions[limit-1].Version, 10)
			break
		}
		tv, ok, err := s.versionEntry(ctx, t, v)
		if err != nil {
			return nil, internal(err)
		}
		if ok { // removed since the listing: gone
			resp.Versions = append(resp.Versions, tv)
		}
	}
	return resp, nil
}

// versionsRequest is the spec's ListTableVersionsRequest. Its paging
// fields, when the body has them, take the place of the query
// parameters of the same names; LanceDB 0.31 sends no body.
type versionsRequest struct {
	ID         []string `json:"id"`
	Limit      *int     `json:"limit"`
	PageToken  *string  `json:"page_token"`
	Descending *bool    `json:"descending"`
}

// versionPage is how a version listing is paged: at most limit versions
// (0: all), after the version in token (after), newest first if desc.
type versionPage struct {
	limit int
	token string
	after uint64
	desc  bool
}

// versionPaging reads and checks the paging of a version listing: a
// negative limit, or a page_token that is not a version number (the only
// tokens this server hands out), is 400 code 13.
func versionPaging(r *http.Request, req versionsRequest) (versionPage, *Error) {
	limit, tok, e := paging(r)
	if e != nil {
		return versionPage{}, e
	}
	pg := versionPage{limit: limit, token: tok, desc: r.URL.Query().Get("descending") != "false"}
	if req.Limit != nil {
		if *req.Limit < 0 {
			return versionPage{}, invalid("limit %d is not a non-negative integer", *req.Limit)
		}
		pg.limit = *req.Limit
	}
	if req.PageToken != nil {
		pg.token = *req.PageToken
	}
	if req.Descending != nil {
		pg.desc = *req.Descending
	}
	if pg.token != "" {
		n, err := strconv.ParseUint(pg.token, 10, 64)
		if err != nil {
			return versionPage{}, invalid("page_token %q is not a version: pass the page_token of the previous answer", pg.token)
		}
		pg.after = n
	}
	return pg, nil
}

// describeVersion answers one version: 404 (code 11) when the log has no
// such version, or when its manifest is no longer in storage (removed by
// a client's cleanup) — never a path to a missing file.
func (s *Server) describeVersion(ctx context.Context, r *http.Request) (any, *Error) {
	var req idRequest
	if e := decode(r, &req); e != nil {
		return nil, e
	}
	ds, e := tableName(r, req.ID)
	if e != nil {
		return nil, e
	}
	if e := s.cfg.Tokens.authorize(r, RoleReader, ds); e != nil {
		return nil, e
	}
	if req.Version == nil {
		return nil, invalid("version is required")
	}
	v := *req.Version
	h, exists, e := s.head(ctx, ds)
	if e != nil {
		return nil, e
	}
	if !exists {
		return nil, tableNotFound(ds)
	}
	if v == 0 || v > h.Version {
		return nil, errorf(http.StatusNotFound, CodeTableVersionNotFound, "table %q has no version %d (head %d)", ds, v, h.Version)
	}
	t, e := s.location(ctx, ds, true)
	if e != nil {
		return nil, e
	}
	tv, ok, err := s.versionEntry(ctx, t, v)
	if err != nil {
		return nil, internal(err)
	}
	if !ok {
		// Committed but not in storage: not published yet, or removed.
		latest, err := publish.LatestVersion(ctx, t.loc)
		if err != nil {
			return nil, internal(err)
		}
		if v > latest {
			if ok, err = s.published(ctx, t.loc, v, publishWait); err != nil {
				return nil, internal(err)
			}
		}
		if !ok {
			return nil, errorf(http.StatusNotFound, CodeTableVersionNotFound, "version %d of table %q is no longer in storage (removed by cleanup)", v, ds)
		}
		if tv, ok, err = s.versionEntry(ctx, t, v); err != nil || !ok {
			return nil, errorf(http.StatusNotFound, CodeTableVersionNotFound, "version %d of table %q is not in storage", v, ds)
		}
	}
	return map[string]any{"version": tv}, nil
}

// deleteVersions refuses BatchDeleteTableVersions: committed versions
// are decided history. (LanceDB's cleanup deletes manifests in storage
// directly and never calls it.)
func (s *Server) deleteVersions(_ context.Context, r *http.Request) (any, *Error) {
	return nil, errorf(http.StatusNotAcceptable, CodeUnsupported, "deleting table versions is not supported: versions are decided history")
}
