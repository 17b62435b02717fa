package main

// `cellguard dataset verify` and `cellguard dataset repair`: the decision
// log against the published Lance table (internal/publish Verify, Repair).

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
	lancepub "cellguard/internal/publish"
	"cellguard/internal/subject"
)

// errDiverged is the error of a verify that found differences: the
// command exits non-zero after printing them.
var errDiverged = errors.New("the decision log and the published table differ")

// openPublished opens ds's decision log and its location (--location, or
// the one its log records).
func openPublished(ctx context.Context, nc *nats.Conn, prefix, ds, location string) (*declog.Log, *lancepub.Location, error) {
	sc, err := subject.NewScheme(prefix)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, err
	}
	l, err := declog.Open(ctx, js, sc, declog.Options{})
	if err != nil {
		return nil, nil, err
	}
	if location == "" {
		cfg, err := l.Config(ctx, ds)
		if err != nil {
			return nil, nil, err
		}
		if location = cfg.GetLocation(); location == "" {
			return nil, nil, fmt.Errorf("dataset %s: not published (no location): nothing to verify", ds)
		}
	}
	loc, err := lancepub.OpenLocation(ctx, location, false)
	if err != nil {
		return nil, nil, err
	}
	return l, loc, nil
}

// datasetVerifyCmd prints what differs between ds's log and its table;
// any difference is an error (exit 1).
func datasetVerifyCmd(ctx context.Context, nc *nats.Conn, prefix, ds, location string, stdout io.Writer) error {
	l, loc, err := openPublished(ctx, nc, prefix, ds, location)
	if err != nil {
		return err
	}
	defer loc.Close()
	v, err := lancepub.Verify(ctx, l, ds, loc)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "dataset %s: log versions %d-%d, %d published in %s, %d files checked\n",
		ds, v.LogFirst, v.LogHead, len(v.Published), v.Location, v.Files)
	for _, d := range v.Diffs {
		fmt.Fprintf(stdout, "  DIFF %s\n", d)
	}
	if len(v.Diffs) > 0 {
		return fmt.Errorf("dataset %s: %w: %d differences", ds, errDiverged, len(v.Diffs))
	}
	fmt.Fprintln(stdout, "ok: every version of the log is published as the log says, and nothing else")
	return nil
}

// datasetRepairCmd brings ds's log forward from its published table.
func datasetRepairCmd(ctx context.Context, nc *nats.Conn, prefix, ds, location string, stdout io.Writer) error {
	l, loc, err := openPublished(ctx, nc, prefix, ds, location)
	if err != nil {
		return err
	}
	defer loc.Close()
	vs, err := lancepub.Repair(ctx, l, ds, loc)
	for _, v := range vs {
		fmt.Fprintf(stdout, "appended version %d from the published table\n", v)
	}
	if err != nil {
		return err
	}
	if len(vs) == 0 {
		fmt.Fprintf(stdout, "dataset %s: the log is not behind its table; nothing to repair\n", ds)
		return nil
	}
	fmt.Fprintf(stdout, "dataset %s: the log is at version %d again; restart its committers (serve) so that they load it\n", ds, vs[len(vs)-1])
	return nil
}
