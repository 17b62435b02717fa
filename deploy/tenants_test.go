package deploy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/conf"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"cellguard/committer"
	"cellguard/events"
	"cellguard/internal/declog"
	"cellguard/internal/drop"
	"cellguard/internal/natsperm"
	"cellguard/internal/natstest"
	"cellguard/internal/subject"
	"cellguard/producer"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

var tenantRoles = []string{"COMMITTER", "WORKER", "READER", "ADMIN"}

// TestTenantAccountsMatch keeps nats/tenants.conf from drifting: every
// tenant account is accounts.conf's CELLGUARD account (JetStream, the
// same users in the same order with the same permissions) with the
// tenant's own nkeys.
func TestTenantAccountsMatch(t *testing.T) {
	t.Setenv("CELLGUARD_SYSTEM_NKEY", "ZZSYSTEM")
	for _, r := range tenantRoles {
		for _, acc := range []string{"CELLGUARD_", "TENANT_A_", "TENANT_B_"} {
			t.Setenv(acc+r+"_NKEY", "ZZ"+r)
			t.Setenv(acc+r+"_INBOX", "_INBOX_ZZ"+r+".>")
		}
	}
	parse := func(path string) map[string]any {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		m, err := conf.Parse(string(b))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return m
	}
	want := parse("nats/accounts.conf")["accounts"].(map[string]any)
	got := parse("nats/tenants.conf")["accounts"].(map[string]any)
	for _, tenant := range []string{"TENANT_A", "TENANT_B"} {
		if !reflect.DeepEqual(got[tenant], want["CELLGUARD"]) {
			t.Errorf("nats/tenants.conf: account %s differs from accounts.conf's CELLGUARD", tenant)
		}
	}
	if !reflect.DeepEqual(got["SYS"], want["SYS"]) {
		t.Error("nats/tenants.conf: SYS differs from accounts.conf's")
	}
}

// tenant is one tenant of the shared server: its roles and its running
// committer.
type tenant struct {
	roles *natstest.Roles
}

func startTenant(t *testing.T, roles *natstest.Roles) tenant {
	t.Helper()
	cm, err := committer.New(roles.Connect(t, "committer"), committer.Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), DiscoverEvery: 20 * time.Millisecond, TakeoverOnStart: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cm.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	waitFor(t, 60*time.Second, "a tenant's committer", cm.Ready)
	return tenant{roles: roles}
}

// log opens the tenant's decision log as role.
func (tn tenant) log(t *testing.T, role string) (*nats.Conn, jetstream.JetStream, *declog.Log) {
	t.Helper()
	nc := tn.roles.Connect(t, role)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	l, err := declog.Open(t.Context(), js, subject.Scheme{}, declog.Options{RequestTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, l
}

// records counts the records of ds in the tenant's log.
func (tn tenant) records(t *testing.T, ds string) int {
	t.Helper()
	_, _, l := tn.log(t, "reader")
	n := 0
	for _, err := range l.Scan(t.Context(), subject.Scheme{}.DecOf(ds), 1, declog.ScanOptions{HeadersOnly: true}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

// TestTenantIsolation starts nats/tenants.conf with tenants A and B, each
// with its own committer, and checks that A's worker, reader and admin
// can neither see B's datasets, stage into them, read their decisions,
// delete them, nor delete a consumer B's reader keeps; each attempt ends
// in a typed error, and B's log, staged messages and durable are as
// before.
func TestTenantIsolation(t *testing.T) {
	all := natstest.RunWithTenants(t, "nats/tenants.conf", "tenant_a", "tenant_b")
	a, b := startTenant(t, all["tenant_a"]), startTenant(t, all["tenant_b"])
	createDataset(t, b.roles.Connect(t, "admin"), "secret")
	createDataset(t, a.roles.Connect(t, "admin"), "orders")

	// B's reader keeps a durable subscriber on secret.
	sub, err := events.NewSubscriber(b.roles.Connect(t, "reader"), events.Config{Dataset: "secret", Durable: "audit", From: 1})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(t.Context())
	if err := sub.Run(sctx, func(context.Context, *events.Committed) error { scancel(); return nil }); err != nil {
		t.Fatal(err)
	}
	before := b.records(t, "secret")
	_, _, bl0 := b.log(t, "reader")
	last, ok, err := bl0.Last(t.Context(), subject.Scheme{}.DecOf("secret"))
	if err != nil || !ok {
		t.Fatalf("B's last record of secret: %v %v", ok, err)
	}
	bLast := last.Seq
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	t.Run("see", func(t *testing.T) {
		for _, role := range []string{"worker", "reader", "admin"} {
			nc := a.roles.Connect(t, role)
			r, err := committer.NewReader(ctx, nc, "cg")
			if err != nil {
				t.Fatal(err)
			}
			ds, err := r.Datasets(ctx)
			if err != nil || len(ds) != 1 || ds[0].Name != "orders" {
				t.Errorf("tenant A %s lists %+v, %v; want its orders only", role, ds, err)
			}
		}
	})
	t.Run("read decisions", func(t *testing.T) {
		for _, role := range []string{"worker", "reader"} {
			pc, err := producer.New(a.roles.Connect(t, role), producer.Config{Timeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pc.Latest(ctx, "secret"); !errors.Is(err, producer.ErrDatasetNotFound) {
				t.Errorf("tenant A %s reads B's secret: %v; want ErrDatasetNotFound", role, err)
			}
			pc.Close()
			_, _, l := a.log(t, role)
			if _, _, err := l.Load(ctx, "secret", 0, l.Versions("secret")); !errors.Is(err, declog.ErrNoDataset) {
				t.Errorf("tenant A %s loads B's secret: %v; want ErrNoDataset", role, err)
			}
			// Reads by stream sequence are not scoped by subject: in
			// A's account they read A's log, never B's.
			for seq := uint64(1); seq <= bLast; seq++ {
				if r, err := l.At(ctx, seq); err == nil && r.Dataset == "secret" {
					t.Errorf("tenant A %s read B's record %d of secret", role, seq)
				}
			}
		}
	})
	t.Run("delete dataset", func(t *testing.T) {
		_, js, l := a.log(t, "admin")
		if _, err := drop.Dataset(ctx, js, l, "secret", drop.Options{Force: true}); !errors.Is(err, drop.ErrNoDataset) {
			t.Errorf("tenant A admin deletes B's secret: %v; want ErrNoDataset", err)
		}
	})
	t.Run("stage", func(t *testing.T) {
		pc, err := producer.New(a.roles.Connect(t, "worker"), producer.Config{Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		// A transaction naming B's dataset lands in A's own staging
		// stream, and A's committer knows no such dataset.
		id := "00000000-0000-4000-8000-00000000000b"
		body, err := proto.Marshal(&lancepb.Transaction{Uuid: id, ReadVersion: 1, Operation: &lancepb.Transaction_Append_{
			Append: &lancepb.Transaction_Append{Fragments: []*lancepb.DataFragment{{PhysicalRows: 1, Files: []*lancepb.DataFile{{
				Path: "x.lance", Fields: []int32{0}, ColumnIndices: []int32{0}, FileMajorVersion: 2, FileMinorVersion: 1,
			}}}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		_, wjs, _ := a.log(t, "worker")
		if _, err := wjs.Publish(ctx, "cg.txn.secret", body, jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
		_, err = pc.Outcome(ctx, "secret", id, 1)
		var rej *producer.RejectedError
		if !errors.As(err, &rej) || rej.Reason != cellguardpb.Reason_UNKNOWN_DATASET {
			t.Errorf("tenant A worker stages into secret: %v; want UNKNOWN_DATASET from A's committer", err)
		}
	})
	t.Run("delete consumer", func(t *testing.T) {
		nc, js, _ := a.log(t, "worker")
		gctx, done := natsperm.For(nc).Guard(ctx)
		if err := done(js.DeleteConsumer(gctx, "CG_DEC", "audit")); !errors.Is(err, natsperm.ErrPermission) || ctx.Err() != nil {
			t.Errorf("tenant A worker deletes a decision-log consumer: %v; want ErrPermission at once", err)
		}
		_, ajs, _ := a.log(t, "admin")
		if err := ajs.DeleteConsumer(ctx, "CG_DEC", "audit"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Errorf("tenant A admin deletes B's durable by name: %v; want ErrConsumerNotFound (A has none)", err)
		}
	})

	_, bjs, bl := b.log(t, "admin")
	if _, err := bjs.Consumer(ctx, "CG_DEC", "audit"); err != nil {
		t.Errorf("B's durable is gone: %v", err)
	}
	if _, ok, err := bl.Tombstone(ctx, "secret"); err != nil || ok {
		t.Errorf("B's secret has a tombstone (%v, %v)", ok, err)
	}
	if n := b.records(t, "secret"); n != before {
		t.Errorf("B's log of secret holds %d records, had %d", n, before)
	}
	st, err := bjs.Stream(ctx, "CG_TXN")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Errorf("B's staging stream: %+v, %v; want empty", info.State, err)
	}
}
