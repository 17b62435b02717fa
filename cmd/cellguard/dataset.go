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
	"cellguard/internal/natsperm"
	"cellguard/internal/subject"
	"cellguard/producer"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table/data"
)

// datasetVerbs are the verbs of `cellguard dataset`, with their arguments.
var datasetVerbs = map[string]string{
	"create": "NAME --schema 'id:int64,x:double?' [--location URL]",
	"adopt":  "NAME --location URL",
	"list":   "",
	"show":   "NAME",
	"log":    "NAME [--from SEQ]",
	"delete": "NAME [--force] [--quiet DURATION] [--purge-data]",
	"verify": "NAME [--location URL]",
	"repair": "NAME [--location URL]",
}

const datasetUsage = `usage: cellguard dataset <verb> [flags]

verbs:
  create NAME --schema S   create a dataset (an Overwrite at read version 0)
  adopt NAME --location U  continue a Lance table another writer created
  list                     list datasets with their head versions (--all: deleted ones too)
  show NAME                show the head manifest and publishing state
  log NAME                 print the decision log of a dataset
  delete NAME              delete a dataset (admin only; --force while it is staged to)
  verify NAME              check the decision log against the published Lance table; exit 1 on any difference
  repair NAME              append the published versions a log that fell behind its table lacks (committer only)

Run 'cellguard dataset <verb> -h' for the flags of a verb.
`

// datasetOpts are the flags of the dataset verbs; each verb registers
// only its own.
type datasetOpts struct {
	schema string
	from   uint64
	wait   time.Duration
	lf     lanceFlags
	all    bool       // list: deleted datasets too
	del    deleteOpts // delete
}

func (o *datasetOpts) register(fs *flag.FlagSet, verb string) {
	switch verb {
	case "create":
		fs.StringVar(&o.schema, "schema", "", "fields as name:type[?],... (type: a Lance logical type such as int64, double, string, fixed_size_list:float:768; ? = nullable)")
		fs.StringVar(&o.lf.location, "location", "", "the dataset's Lance directory (path, file://, s3://… URL); its versions are published there")
		fs.StringVar(&o.lf.readers, "readers", "", "readers the published versions serve: lance8 (default; no data overlays) or cellguard")
		fs.StringVar(&o.lf.storageVersion, "storage-version", "", "Lance data storage version of the new table: 2.2 (default, LanceDB 0.39's), 2.1 (LanceDB 0.31's) or 2.0")
		fs.DurationVar(&o.wait, "wait", 30*time.Second, "how long to wait for the decision")
	case "adopt":
		fs.StringVar(&o.lf.location, "location", "", "the Lance directory to adopt (path, file://, s3://… URL)")
		fs.DurationVar(&o.wait, "wait", 30*time.Second, "how long to wait for the decision")
	case "log":
		fs.Uint64Var(&o.from, "from", 1, "first log sequence to print")
	case "list":
		fs.BoolVar(&o.all, "all", false, "list deleted datasets too (marked deleted)")
	case "delete":
		o.del.register(fs)
	case "verify", "repair":
		fs.StringVar(&o.lf.location, "location", "", "the Lance directory to check (default: the dataset's location, from its log)")
	}
}

func dataset(ctx context.Context, verb string, args []string, stdout, stderr io.Writer) error {
	if verb == "-h" || verb == "--help" || verb == "help" {
		fmt.Fprint(stdout, datasetUsage)
		return nil
	}
	argsHelp, ok := datasetVerbs[verb]
	if !ok {
		return usageError{fmt.Sprintf("dataset: unknown verb %q (want create, adopt, list, show, log, delete, verify or repair)", verb)}
	}
	fs := flag.NewFlagSet("dataset "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf connFlags
	cf.register(fs, defaultClientURL)
	var o datasetOpts
	o.register(fs, verb)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: cellguard dataset %s %s\n\nflags:\n", verb, argsHelp)
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := checkDatasetArgs(verb, pos); err != nil {
		return err
	}
	if verb == "create" {
		// A bad schema is refused before anything is dialled.
		if _, err := parseSchema(o.schema); err != nil {
			return usageError{err.Error()}
		}
	}
	nc, err := cf.connect("cellguard-cli")
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	// A refusal by the server (the role lacks a permission) ends the verb
	// at once with an error naming the subject.
	ctx, done := natsperm.For(nc).Guard(ctx, append([]string{cf.prefix + ".>"}, natsperm.JetStream...)...)
	return done(datasetVerb(ctx, nc, &cf, verb, pos, &o, stdout))
}

// checkDatasetArgs checks the positional arguments: none for list, one
// valid dataset name for the other verbs.
func checkDatasetArgs(verb string, pos []string) error {
	if verb == "list" {
		if len(pos) != 0 {
			return usageError{"dataset list: takes no arguments"}
		}
		return nil
	}
	if len(pos) != 1 {
		return usageError{fmt.Sprintf("dataset %s: want one dataset name, got %d arguments", verb, len(pos))}
	}
	validate := subject.Validate
	if verb == "log" {
		validate = subject.ValidateLog // the reserved stray log may be read too
	}
	if err := validate(pos[0]); err != nil {
		return usageError{err.Error()}
	}
	return nil
}

func datasetVerb(ctx context.Context, nc *nats.Conn, cf *connFlags, verb string, pos []string, o *datasetOpts, stdout io.Writer) error {
	var name string
	if len(pos) > 0 {
		name = pos[0]
	}
	switch verb {
	case "create":
		return datasetCreate(ctx, nc, cf.prefix, name, o.schema, o.lf, o.wait, stdout)
	case "adopt":
		return datasetAdopt(ctx, nc, cf.prefix, name, o.lf.location, o.wait, stdout)
	case "delete":
		return datasetDelete(ctx, nc, cf.prefix, name, o.del, stdout)
	case "verify":
		return datasetVerifyCmd(ctx, nc, cf.prefix, name, o.lf.location, stdout)
	case "repair":
		return datasetRepairCmd(ctx, nc, cf.prefix, name, o.lf.location, stdout)
	case "list":
		return datasetList(ctx, nc, cf.prefix, o.all, stdout)
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
			return fmt.Errorf("dataset %s: %w (no committed version)", name, errNoSuchDataset)
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
		n := 0
		err = r.Log(ctx, name, o.from, func(seq uint64, rec *cellguardpb.Decision) error {
			n++
			fmt.Fprintln(stdout, formatDecision(seq, rec))
			return nil
		})
		if err == nil && n == 0 && o.from <= 1 {
			return fmt.Errorf("dataset %s: %w (no decisions)", name, errNoSuchDataset)
		}
		return err
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
	switch r.Outcome {
	case cellguardpb.Outcome_OUTCOME_COMMITTED:
		fmt.Fprintf(&b, "%6d committed v%-6d txn %s read v%d (staged #%d)", seq, r.Version, r.TxnUuid, r.ReadVersion, r.TxnSeq)
	case cellguardpb.Outcome_OUTCOME_DELETED:
		fmt.Fprintf(&b, "%6d DELETED at head v%d: %s", seq, r.HeadVersion, r.Message)
	default:
		fmt.Fprintf(&b, "%6d rejected %-22s txn %s read v%d head v%d (staged #%d): %s", seq, r.Reason, r.TxnUuid, r.ReadVersion, r.HeadVersion, r.TxnSeq, r.Message)
	}
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "\n         precondition %d field %d fragment %d: %s rows %v changed at v%d by %s",
			v.PreconditionIndex, v.FieldId, v.FragmentId, v.Reason, v.SampleRows, v.CulpritVersion, v.CulpritTxnUuid)
	}
	return b.String()
}

// errNoSuchDataset reports a dataset that was never created: it has no
// committed record (a transaction staged to it left a rejection at most).
var errNoSuchDataset = errors.New("no such dataset")

// parseSchema turns "id:int64,x:double?" into top-level Lance fields. Each
// type must be a Lance logical type cellguard reads and writes, at most
// one '?' marks a nullable field, and names are unique.
func parseSchema(s string) ([]*lancepb.Field, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("dataset create: --schema is required, e.g. --schema 'id:int64,x:double?'")
	}
	var fields []*lancepb.Field
	seen := map[string]bool{}
	for i, part := range strings.Split(s, ",") {
		name, typ, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok || name == "" || typ == "" {
			return nil, fmt.Errorf("schema field %q: want name:type", part)
		}
		if seen[name] {
			return nil, fmt.Errorf("schema field %q: duplicate name %q", part, name)
		}
		seen[name] = true
		logical, nullable := strings.CutSuffix(typ, "?")
		if _, ok := data.ArrowType(logical); !ok {
			return nil, fmt.Errorf("schema field %q: unknown type %q (want a Lance logical type: bool, int8…int64, uint8…uint64, float, double, string, large_string, binary, large_binary or fixed_size_list:<numeric>:<dim>, with ? for nullable)", part, typ)
		}
		fields = append(fields, &lancepb.Field{
			Id: int32(i), Name: name, ParentId: -1, LogicalType: logical, Nullable: nullable,
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
