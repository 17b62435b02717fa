package natstest_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/natstest"
)

func TestRunServerRestartKeepsData(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)
	st, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := info.State.Msgs, uint64(1); got != want {
		t.Errorf("msgs after restart = %d, want %d", got, want)
	}
}
