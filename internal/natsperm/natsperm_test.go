package natsperm

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestMatch(t *testing.T) {
	cases := []struct {
		pattern, subject string
		want             bool
	}{
		{"cg.txn.orders", "cg.txn.orders", true},
		{"cg.txn.*", "cg.txn.orders", true},
		{"cg.txn.*", "cg.txn.orders.x", false},
		{"$JS.API.>", "$JS.API.STREAM.INFO.CG_TXN", true},
		{"$JS.API.>", "$JS.API", false},
		{"cg.dec.orders.*", "cg.dec.users.committed", false},
		{"a.b", "a", false},
	}
	for _, c := range cases {
		if got := Match(c.pattern, c.subject); got != c.want {
			t.Errorf("Match(%q, %q) = %v", c.pattern, c.subject, got)
		}
	}
}

func TestParse(t *testing.T) {
	err := fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Publish to "cg.txn.orders"`)
	p, ok := Parse(err)
	if !ok || p.Op != "publish" || p.Subject != "cg.txn.orders" {
		t.Fatalf("Parse = %+v, %v", p, ok)
	}
	if !errors.Is(p, ErrPermission) || !errors.Is(p, nats.ErrPermissionViolation) {
		t.Error("*Error does not match the sentinels")
	}
	if _, ok := Parse(errors.New(`Permissions Violation for Publish to "x"`)); ok {
		t.Error("parsed an error that is not a permission violation")
	}
}

func TestGuardEndsOnlyMatchingCalls(t *testing.T) {
	w := &Watcher{guards: map[uint64]guard{}}
	hit, doneHit := w.Guard(context.Background(), "cg.txn.orders")
	miss, doneMiss := w.Guard(context.Background(), "cg.txn.users")
	w.report(fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Publish to "cg.txn.orders"`))
	<-hit.Done()
	if err := doneHit(context.Canceled); !errors.Is(err, ErrPermission) {
		t.Errorf("guarded call: %v, want ErrPermission", err)
	}
	if miss.Err() != nil {
		t.Error("a refusal of another subject ended an unrelated call")
	}
	sentinel := errors.New("own error")
	if err := doneMiss(sentinel); err != sentinel {
		t.Errorf("unrefused call: %v, want its own error", err)
	}
}
