package decide

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// TestRejectionTextIsTheSameInEveryBuild: the protobuf library spaces its
// error texts with U+00A0 in some builds; a decision's message never
// carries one, so the log reads the same whichever binary decided.
func TestRejectionTextIsTheSameInEveryBuild(t *testing.T) {
	err := proto.Unmarshal([]byte("this is not a transaction"), &lancepb.Transaction{})
	if err == nil {
		t.Fatal("garbage decoded")
	}
	for _, s := range []string{err.Error(), "proto:\u00a0cannot parse invalid wire-format data"} {
		got := stableText(s)
		if strings.ContainsRune(got, '\u00a0') {
			t.Fatalf("stableText(%q) = %q keeps a non-breaking space", s, got)
		}
		if !strings.Contains(got, "proto: cannot parse") {
			t.Fatalf("stableText(%q) = %q", s, got)
		}
	}
}
