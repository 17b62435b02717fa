package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"cellguard/committer"
	"cellguard/internal/declog"
	"cellguard/internal/subject"
	"cellguard/producer"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

func dataset(ctx context.Context, verb string, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("dataset "+verb, flag.ContinueOnError)
	var cf connFlags
	cf.register(fs, "nats://127.0.0.1:4222")
	schema := fs.String("schema", "", "create: fields as name:type[?],... (type: a Lance logical type such as int64, double, string; ? = nullable)")
	from := fs.Uint64("from", 1, "log: first log sequence to print")
	wait := fs.Duration("wait", 30*time.Second, "create: how long to wait for the decision")
	var lf lanceFlags
	fs.StringVar(&lf.location, "location", "", "create, adopt: the dataset's Lance directory (path, file://, s3://… URL); its versions are published there")
	fs.StringVar(&lf.readers, "readers", "", "create: readers the published versions serve: lance8 (default; no data overlays) or cellguard")
	fs.StringVar(&lf.storageVersion, "storage-version", "", "create: Lance data storage version of a published dataset: 2.1 (default) or 2.0")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	nc, err := cf.connect("cellguard-cli")
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var name string
	if len(pos) > 0 {
		name = pos[0]
	}
	if verb != "list" {
		if err := subject.Validate(name); err != nil {
			return usageError{err.Error()}
		}
	}
	switch verb {
	case "create":
		return datasetCreate(ctx, nc, cf.prefix, name, *schema, lf, *wait, stdout)
	case "adopt":
		return datasetAdopt(ctx, nc, cf.prefix, name, lf.location, *wait, stdout)
	case "list":
		r, err := committer.NewReader(ctx, nc, cf.prefix)
		if err != nil {
			return err
		}
		ds, err := r.Datasets(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%-32s %10s %10s\n", "DATASET", "HEAD", "REJECTED")
		for _, d := range ds {
			fmt.Fprintf(stdout, "%-32s %10d %10d\n", d.Name, d.Head, d.Rejected)
		}
		return nil
	case "show":
		r, err := committer.NewReader(ctx, nc, cf.prefix)
		if err != nil {
			return err
		}
		m, err := r.Head(ctx, name)
		if err != nil {
			return err
		}
		if m == nil {
			return fmt.Errorf("dataset %s has no committed version", name)
		}
		fmt.Fprintf(stdout, "dataset %s at version %d\n", name, m.Version())
		fmt.Fprintf(stdout, "schema:\n")
		for _, f := range m.Schema().Fields() {
			null := ""
			if f.GetNullable() {
				null = " nullable"
			}
			fmt.Fprintf(stdout, "  %3d %-24s %s%s (parent %d)\n", f.GetId(), f.GetName(), f.GetLogicalType(), null, f.GetParentId())
		}
		var rows, live uint64
		fmt.Fprintf(stdout, "fragments: %d\n", m.NumFragments())
		for f := range m.Fragments() {
			rows += f.PhysicalRows()
			live += f.LiveRows()
			del := ""
			if df := f.DeletionFile(); df != nil {
				del = fmt.Sprintf(" deleted %d", df.GetNumDeletedRows())
			}
			fmt.Fprintf(stdout, "  %6d rows %8d files %d%s\n", f.ID(), f.PhysicalRows(), len(f.Files()), del)
		}
		fmt.Fprintf(stdout, "rows: %d physical, %d live\n", rows, live)
		return showPublishing(ctx, nc, cf.prefix, name, m.Version(), stdout)
	case "log":
		r, err := committer.NewReader(ctx, nc, cf.prefix)
		if err != nil {
			return err
		}
		return r.Log(ctx, name, *from, func(seq uint64, rec *cellguardpb.Decision) error {
			fmt.Fprintln(stdout, formatDecision(seq, rec))
			return nil
		})
	}
	return usageError{fmt.Sprintf("dataset: unknown verb %q", verb)}
}

// parseInterspersed parses flags that may follow positional arguments
// (`dataset create NAME --schema ...`) and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// formatDecision renders one log record on one line (plus violations).
func formatDecision(seq uint64, r *cellguardpb.Decision) string {
	var b strings.Builder
	if r.Outcome == cellguardpb.Outcome_OUTCOME_COMMITTED {
		fmt.Fprintf(&b, "%6d committed v%-6d txn %s read v%d (staged #%d)", seq, r.Version, r.TxnUuid, r.ReadVersion, r.TxnSeq)
	} else {
		fmt.Fprintf(&b, "%6d rejected %-22s txn %s read v%d head v%d (staged #%d): %s", seq, r.Reason, r.TxnUuid, r.ReadVersion, r.HeadVersion, r.TxnSeq, r.Message)
	}
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "\n         precondition %d field %d fragment %d: %s rows %v changed at v%d by %s",
			v.PreconditionIndex, v.FieldId, v.FragmentId, v.Reason, v.SampleRows, v.CulpritVersion, v.CulpritTxnUuid)
	}
	return b.String()
}

// parseSchema turns "id:int64,x:double?" into top-level Lance fields.
func parseSchema(s string) ([]*lancepb.Field, error) {
	var fields []*lancepb.Field
	for i, part := range strings.Split(s, ",") {
		name, typ, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok || name == "" || typ == "" {
			return nil, fmt.Errorf("schema field %q: want name:type", part)
		}
		nullable := strings.HasSuffix(typ, "?")
		fields = append(fields, &lancepb.Field{
			Id: int32(i), Name: name, ParentId: -1, LogicalType: strings.TrimSuffix(typ, "?"), Nullable: nullable,
			Type: lancepb.Field_LEAF,
		})
	}
	return fields, nil
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// datasetCreate commits a creating Overwrite with an empty table of the
// given schema, through the producer SDK.
func datasetCreate(ctx context.Context, nc *nats.Conn, prefix, name, schema string, lf lanceFlags, wait time.Duration, stdout io.Writer) error {
	if schema == "" {
		return usageError{"dataset create: --schema is required"}
	}
	fields, err := parseSchema(schema)
	if err != nil {
		return usageError{err.Error()}
	}
	pc, err := producer.New(nc, producer.Config{Prefix: prefix, Timeout: wait})
	if err != nil {
		return err
	}
	defer pc.Close()
	txn := producer.Create(name, fields)
	cfg, err := lf.config(ctx)
	if err != nil {
		return err
	}
	if cfg != nil {
		prop, err := declog.EncodeConfig(cfg)
		if err != nil {
			return err
		}
		txn.SetProperty(declog.ConfigProperty, prop)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	v, err := pc.Commit(ctx, txn)
	var rej *producer.RejectedError
	if errors.As(err, &rej) {
		return fmt.Errorf("dataset %s not created: %s: %s", name, rej.Reason, rej.Message)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "dataset %s created at version %d (txn %s)\n", name, v, txn.ID())
	return nil
}
