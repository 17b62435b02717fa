package subject_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/natstest"
	"cellguard/internal/subject"
)

// TestValidateMessages: every kind of bad name gets a reason a person can
// act on, and the name is shown quoted, so invisible and look-alike
// characters are visible.
func TestValidateMessages(t *testing.T) {
	for _, c := range []struct{ name, want string }{
		{"a.b", `invalid dataset name "a.b": '.' separates subject tokens at byte 1`},
		{"*", `invalid dataset name "*": '*' is a subject wildcard at byte 0`},
		{"x>", `invalid dataset name "x>": '>' is a subject wildcard at byte 1`},
		{"a b", `whitespace ' ' at byte 1`},
		{"a\tb", `"a\tb": whitespace '\t' at byte 1`},
		{"a\x00", `"a\x00": control character '\x00' at byte 1`},
		{"dätä", `"dätä": non-ASCII character 'ä' (U+00E4) at byte 1`},
		{"\u0430bc", `non-ASCII character 'а' (U+0430) at byte 0`}, // Cyrillic a
		{"a\xffb", `"a\xffb": invalid UTF-8 byte "\xff" at byte 1`},
		{"a/b", `character '/' at byte 1`},
		{"_cg_stray", `invalid dataset name "_cg_stray": names starting with "_cg_" are reserved for cellguard`},
	} {
		err := subject.Validate(c.name)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%q) = %v; want it to contain %s", c.name, err, c.want)
		}
		if !errors.Is(err, subject.ErrInvalidDataset) {
			t.Errorf("Validate(%q) = %v; does not wrap ErrInvalidDataset", c.name, err)
		}
	}
}

func TestValidateLog(t *testing.T) {
	if err := subject.ValidateLog(subject.StrayDataset); err != nil {
		t.Errorf("ValidateLog(%q) = %v, want nil: the reserved log is readable", subject.StrayDataset, err)
	}
	if err := subject.Validate(subject.StrayDataset); !errors.Is(err, subject.ErrInvalidDataset) {
		t.Errorf("Validate(%q) = %v, want ErrInvalidDataset: no one writes to it as a dataset", subject.StrayDataset, err)
	}
	if err := subject.ValidateLog("a.b"); !errors.Is(err, subject.ErrInvalidDataset) {
		t.Errorf("ValidateLog(a.b) = %v, want ErrInvalidDataset", err)
	}
}

func TestParseStaged(t *testing.T) {
	var s subject.Scheme
	for _, c := range []struct {
		subj, ds string
		err      error
	}{
		{"cg.txn.orders", "orders", nil},
		{"cg.txn.*", "*", subject.ErrInvalidDataset},
		{"cg.txn.>", ">", subject.ErrInvalidDataset},
		{"cg.txn.a.b", "a.b", subject.ErrInvalidDataset},
		{"cg.txn.dätä", "dätä", subject.ErrInvalidDataset},
		{"cg.txn.", "", subject.ErrNotOurs},
		{"cg.dec.orders.committed", "", subject.ErrNotOurs},
		{"other.txn.orders", "", subject.ErrNotOurs},
	} {
		ds, err := s.ParseStaged(c.subj)
		if ds != c.ds || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("ParseStaged(%q) = %q, %v; want %q, %v", c.subj, ds, err, c.ds, c.err)
		}
		var de *subject.DatasetError
		if errors.Is(err, subject.ErrInvalidDataset) && (!errors.As(err, &de) || de.Name != c.ds) {
			t.Errorf("ParseStaged(%q) error %v does not name the token", c.subj, err)
		}
	}
}

// TestPartitionMatchesServer publishes to a real server's stream whose
// subject transform is TxnPartitionMapping, and checks that the subject
// each message was stored under carries Partition of its dataset. The
// streams are in memory: the transform is what is checked, not a store.
func TestPartitionMatchesServer(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var s subject.Scheme
	for _, n := range []int{1, 7, 64} {
		src, dest := s.TxnPartitionMapping(n)
		name := fmt.Sprintf("PART%d", n)
		st, err := js.CreateStream(ctx, jetstream.StreamConfig{
			Name: name, Subjects: []string{src}, Storage: jetstream.MemoryStorage,
			SubjectTransform: &jetstream.SubjectTransformConfig{Source: src, Destination: dest},
		})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for i := range 40 {
			names = append(names, fmt.Sprintf("ds-%d", i*7919))
		}
		names = append(names, "a", "orders_2024", strings.Repeat("z", subject.MaxDatasetLen))
		for _, ds := range names {
			if _, err := js.Publish(ctx, s.Txn(ds), []byte(ds)); err != nil {
				t.Fatal(err)
			}
		}
		for i, ds := range names {
			m, err := st.GetMsg(ctx, uint64(i+1))
			if err != nil {
				t.Fatal(err)
			}
			if want := s.TxnPartitioned(n, subject.Partition(ds, n), ds); m.Subject != want {
				t.Errorf("n=%d: %q stored as %q; Partition says %q", n, ds, m.Subject, want)
			}
		}
		if err := js.DeleteStream(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPartitionBounds(t *testing.T) {
	if p := subject.Partition("x", 0); p != 0 {
		t.Errorf("Partition(x, 0) = %d; want 0", p)
	}
	seen := map[int]bool{}
	for i := range 1000 {
		p := subject.Partition(fmt.Sprint("ds", i), 16)
		if p < 0 || p >= 16 {
			t.Fatalf("Partition = %d, outside [0, 16)", p)
		}
		seen[p] = true
	}
	if len(seen) != 16 {
		t.Errorf("1000 names fill %d of 16 partitions", len(seen))
	}
}

// TestPartitionedNamesRoundTrip: the partitioned subject and consumer
// name of every (count, partition, dataset) parse back; other forms do
// not parse as partitioned.
func TestPartitionedNamesRoundTrip(t *testing.T) {
	var s subject.Scheme
	for _, n := range []int{1, 7, 64, 1024} {
		for _, ds := range []string{"a", "orders_2024", "x-y"} {
			k := subject.Partition(ds, n)
			gn, gk, gds, err := s.ParsePartitioned(s.TxnPartitioned(n, k, ds))
			if err != nil || gn != n || gk != k || gds != ds {
				t.Errorf("ParsePartitioned(%q) = %d, %d, %q, %v", s.TxnPartitioned(n, k, ds), gn, gk, gds, err)
			}
			if f := s.PartitionFilter(n, k); strings.TrimSuffix(f, "*")+ds != s.TxnPartitioned(n, k, ds) {
				t.Errorf("filter %q does not match %q", s.PartitionFilter(n, k), s.TxnPartitioned(n, k, ds))
			}
			cn, ck, ok := subject.ParsePartitionConsumer(s.PartitionConsumer(n, k))
			if !ok || cn != n || ck != k {
				t.Errorf("ParsePartitionConsumer(%q) = %d, %d, %v", s.PartitionConsumer(n, k), cn, ck, ok)
			}
		}
	}
	for _, bad := range []string{"cg.txn.a", "cg.txp.4.a", "cg.txp.4.4.a", "cg.txp.x.1.a", "cg.txp.0.0.a", "cg.txp.4.-1.a", "cg.txp.4.1."} {
		if _, _, _, err := s.ParsePartitioned(bad); !errors.Is(err, subject.ErrNotOurs) {
			t.Errorf("ParsePartitioned(%q) = %v, want ErrNotOurs", bad, err)
		}
	}
	if _, _, _, err := s.ParsePartitioned("cg.txp.4.1.a$b"); !errors.Is(err, subject.ErrInvalidDataset) {
		t.Errorf("an invalid dataset token: %v, want ErrInvalidDataset", err)
	}
	for _, bad := range []string{"commit-orders", "partition-4", "partition-4-4", "partition-04-1", "partition-4-x"} {
		if _, _, ok := subject.ParsePartitionConsumer(bad); ok {
			t.Errorf("ParsePartitionConsumer(%q) parsed", bad)
		}
	}
}
