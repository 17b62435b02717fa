package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protopath"
	"google.golang.org/protobuf/reflect/protorange"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"cellguard/evaluator"
	"cellguard/table"
)

// txnInspect decodes a Lance transaction file and prints a summary and
// the whole message as indented JSON.
func txnInspect(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("txn inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: cellguard txn inspect FILE.txn\n\nDecode a Lance transaction file (_transactions/*.txn) and print it:\na summary, then the whole transaction as JSON. Works offline.\n")
	}
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
	shown, opaque := describeOpaqueAnys(txn)
	for _, o := range opaque {
		fmt.Fprintf(stdout, "opaque:        %s (%d bytes; type not known to cellguard)\n", o.url, o.size)
	}
	js, err := protojson.MarshalOptions{Resolver: opaqueResolver{}}.Marshal(shown)
	if err != nil {
		return err
	}
	// protojson varies its whitespace from build to build on purpose;
	// json.Indent makes the output stable for people and scripts.
	var out bytes.Buffer
	if err := json.Indent(&out, js, "", "  "); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "message:\n%s\n", out.Bytes())
	return nil
}

// opaqueAny is a google.protobuf.Any whose type this binary does not link,
// such as the index details Lance attaches to CreateIndex.
type opaqueAny struct {
	url  string
	size int
}

// describeOpaqueAnys returns a copy of m in which the value of every Any
// of an unknown type is replaced by a string naming its size, so that it
// prints as JSON instead of failing, and the list of those Anys in order.
func describeOpaqueAnys(m proto.Message) (proto.Message, []opaqueAny) {
	out := proto.Clone(m)
	var found []opaqueAny
	_ = protorange.Range(out.ProtoReflect(), func(p protopath.Values) error {
		v := p.Index(-1).Value
		msg, ok := v.Interface().(protoreflect.Message)
		if !ok || msg.Descriptor().FullName() != anyName {
			return nil
		}
		fields := msg.Descriptor().Fields()
		urlField, valueField := fields.ByNumber(1), fields.ByNumber(2)
		url := msg.Get(urlField).String()
		if _, err := protoregistry.GlobalTypes.FindMessageByURL(url); err == nil {
			return nil
		}
		size := len(msg.Get(valueField).Bytes())
		found = append(found, opaqueAny{url: url, size: size})
		note, _ := proto.Marshal(wrapperspb.String(fmt.Sprintf("%d bytes", size)))
		msg.Set(valueField, protoreflect.ValueOfBytes(note))
		return nil
	})
	return out, found
}

const anyName protoreflect.FullName = "google.protobuf.Any"

// opaqueResolver resolves the types linked into this binary and reads
// every other Any as the size note describeOpaqueAnys left in it.
type opaqueResolver struct{}

func (opaqueResolver) FindMessageByURL(url string) (protoreflect.MessageType, error) {
	if mt, err := protoregistry.GlobalTypes.FindMessageByURL(url); err == nil {
		return mt, nil
	}
	return (&wrapperspb.StringValue{}).ProtoReflect().Type(), nil
}

func (opaqueResolver) FindMessageByName(n protoreflect.FullName) (protoreflect.MessageType, error) {
	return protoregistry.GlobalTypes.FindMessageByName(n)
}

func (opaqueResolver) FindExtensionByName(n protoreflect.FullName) (protoreflect.ExtensionType, error) {
	return protoregistry.GlobalTypes.FindExtensionByName(n)
}

func (opaqueResolver) FindExtensionByNumber(m protoreflect.FullName, f protoreflect.FieldNumber) (protoreflect.ExtensionType, error) {
	return protoregistry.GlobalTypes.FindExtensionByNumber(m, f)
}
