package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"google.golang.org/protobuf/encoding/protojson"

	"cellguard/evaluator"
	"cellguard/table"
)

// txnInspect decodes a Lance transaction file and prints a summary and
// the whole message as indented JSON.
func txnInspect(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("txn inspect", flag.ContinueOnError)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{"txn inspect: want one .txn file"}
	}
	path := pos[0]
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	txn, op, derr := table.DecodeTransaction(b)
	if txn == nil {
		return fmt.Errorf("%s: %w", path, derr)
	}
	fmt.Fprintf(stdout, "file:          %s (%d bytes)\n", path, len(b))
	fmt.Fprintf(stdout, "uuid:          %s\n", txn.GetUuid())
	fmt.Fprintf(stdout, "read version:  %d\n", txn.GetReadVersion())
	fmt.Fprintf(stdout, "operation:     %s\n", op)
	if derr != nil {
		fmt.Fprintf(stdout, "problem:       %v\n", derr)
	}
	if tag := txn.GetTag(); tag != "" {
		fmt.Fprintf(stdout, "tag:           %s\n", tag)
	}
	fmt.Fprintf(stdout, "preconditions: %d\n", len(txn.GetPreconditions()))
	if pre, err := evaluator.Decode(txn.GetPreconditions(), evaluator.Limits{}); err != nil {
		fmt.Fprintf(stdout, "  invalid: %v\n", err)
	} else {
		for i, p := range pre {
			fmt.Fprintf(stdout, "  %d: fields %v rows %s\n", i, p.Fields, p.Rows)
		}
	}
	js, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(txn)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "message:\n%s\n", js)
	return nil
}
