package table

// manifest_enc.go writes a Manifest's wire form straight from what it
// holds. Each Fragment keeps its own wire form (fragment.go), so the
// manifest is its schema's fields, those bytes one after another, and its
// header: nothing is decoded into messages and encoded again, which for a
// table of 100,000 fragments was most of a checkpoint's cost.

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// manifestFragments is the field number of lance Manifest.fragments.
const manifestFragments protowire.Number = 2

// AppendEncoding appends m's wire form, a lance Manifest message, to b:
// the message Proto returns, in the field order a deterministic Marshal
// of it writes (fields, fragments in table order, the header's fields,
// unknown fields last), so that it decodes to a message equal to Proto's.
func (m *Manifest) AppendEncoding(b []byte) ([]byte, error) {
	det := proto.MarshalOptions{Deterministic: true}
	b, err := det.MarshalAppend(b, &lancepb.Manifest{Fields: m.schema.Fields()})
	if err != nil {
		return nil, err
	}
	for f := range m.Fragments() {
		enc := f.enc
		if f.pb != nil {
			if enc, err = det.Marshal(f.pb); err != nil {
				return nil, err
			}
		}
		b = protowire.AppendTag(b, manifestFragments, protowire.BytesType)
		b = protowire.AppendBytes(b, enc)
	}
	return det.MarshalAppend(b, m.Header())
}
