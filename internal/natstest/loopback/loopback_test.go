package loopback_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/natstest/loopback"
)

func TestStartClusterReplicatesStreams(t *testing.T) {
	c, err := loopback.StartCluster(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(info.Cluster.Replicas)+1, 3; got != want {
		t.Errorf("stream nodes = %d, want %d", got, want)
	}
}

func TestClusterOptionsRejectsNoNodes(t *testing.T) {
	if _, err := loopback.ClusterOptions("c", 0, func(int) string { return t.TempDir() }); err == nil {
		t.Error("ClusterOptions(0 nodes) = nil error, want one")
	}
}
