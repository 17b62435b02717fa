package declog_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
	"cellguard/internal/natstest"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// TestBoundedScansMakeNoConsumer: on a decision stream that answers
// direct gets (as the committer creates it), bounded scans (whole, from
// and to the middle, headers only or with bodies, over more records than
// one batch holds, with another dataset's records in between) and a Find
// read every record in order and leave no consumer on the stream; on one
// without direct gets they read the same through consumers.
func TestBoundedScansMakeNoConsumer(t *testing.T) {
	for _, direct := range []bool{true, false} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
			srv := natstest.RunServer(t)
			_, js := natstest.Connect(t, srv.URL())
			sc, _ := subject.NewScheme("")
			ctx := t.Context()
			dec, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: sc.DecStream(), Subjects: []string{sc.DecAll()}, AllowDirect: direct, AllowAtomicPublish: true})
			if err != nil {
				t.Fatal(err)
			}
			l := declog.New(js, sc, dec, nil, declog.Options{})
			const n = 600 // more than two batches
			expect := map[string]uint64{}
			seqOf := map[string][]uint64{}
			for v := uint64(1); v <= n; v++ {
				for _, ds := range []string{"alpha", "beta"} {
					if ds == "beta" && v%3 != 0 {
						continue
					}
					seqs, err := l.Append(ctx, ds, expect[ds], []*cellguardpb.Decision{committed(t, ds, uint64(len(seqOf[ds])+1))})
					if err != nil {
						t.Fatal(err)
					}
					expect[ds] = seqs[0]
					seqOf[ds] = append(seqOf[ds], seqs[0])
				}
			}
			alpha := seqOf["alpha"]
			read := func(from uint64, opts declog.ScanOptions) (seqs []uint64) {
				t.Helper()
				for r, err := range l.Scan(ctx, sc.Dec("alpha", subject.Committed), from, opts) {
					if err != nil {
						t.Fatal(err)
					}
					if want := uint64(slices.Index(alpha, r.Seq) + 1); r.Version != want {
						t.Fatalf("record %d: version %d, want %d", r.Seq, r.Version, want)
					}
					if !opts.HeadersOnly && (r.Decision == nil || r.Decision.GetTxnUuid() != r.TxnID) {
						t.Fatalf("record %d: body %v", r.Seq, r.Decision)
					}
					if r.Time.IsZero() {
						t.Fatalf("record %d: no time", r.Seq)
					}
					seqs = append(seqs, r.Seq)
				}
				return seqs
			}
			if got := read(1, declog.ScanOptions{}); !slices.Equal(got, alpha) {
				t.Errorf("whole scan: %d records, want %d", len(got), len(alpha))
			}
			if got := read(alpha[100], declog.ScanOptions{HeadersOnly: true, To: alpha[450]}); !slices.Equal(got, alpha[100:451]) {
				t.Errorf("scan of the middle: %d records, want %d", len(got), 351)
			}
			if got := read(alpha[599], declog.ScanOptions{}); !slices.Equal(got, alpha[599:]) {
				t.Errorf("scan of the last: %v, want %v", got, alpha[599:])
			}
			if got := read(alpha[599]+1, declog.ScanOptions{}); len(got) != 0 {
				t.Errorf("scan past the end: %v", got)
			}
			id := fmt.Sprintf("00000000-0000-4000-8000-%012d", 500)
			if r, ok, err := l.Find(ctx, "alpha", id, 1); err != nil || !ok || r.Seq != alpha[499] {
				t.Errorf("Find(version 500) = %d, %v, %v; want %d", r.Seq, ok, err, alpha[499])
			}
			// A read the direct gets cannot finish (To past the filter's
			// last record, as when a replica is behind) ends there if
			// Partial, and goes on with a consumer otherwise.
			beyond := alpha[599] + 50
			if got := read(alpha[590], declog.ScanOptions{To: beyond, Partial: true}); !slices.Equal(got, alpha[590:]) {
				t.Errorf("partial scan: %v, want %v", got, alpha[590:])
			}
			consumers := func() int {
				t.Helper()
				info, err := dec.Info(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return info.State.Consumers
			}
			if n := consumers(); direct && n != 0 {
				t.Errorf("%d consumers left on the stream after bounded reads, want none", n)
			}
			if got := read(alpha[590], declog.ScanOptions{To: beyond}); !slices.Equal(got, alpha[590:]) {
				t.Errorf("scan past the filter's end: %v, want %v", got, alpha[590:])
			}
			if n := consumers(); direct && n != 1 {
				t.Errorf("%d consumers after a read the direct gets could not finish, want the one it went on with", n)
			}
		})
	}
}
