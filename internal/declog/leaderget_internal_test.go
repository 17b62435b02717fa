package declog

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/natstest"
	"cellguard/internal/subject"
)

// TestAtLeaderMatchesDirectGet: the leader's answer for a record equals
// the direct get's (subject, sequence, headers, body), and a sequence the
// stream does not hold is ErrMsgNotFound from both.
func TestAtLeaderMatchesDirectGet(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var sc subject.Scheme
	dec, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: sc.DecStream(), Subjects: []string{sc.DecAll()}, AllowDirect: true})
	if err != nil {
		t.Fatal(err)
	}
	l := New(js, sc, dec, nil, Options{})
	msg := &nats.Msg{Subject: sc.Dec("ds", subject.Committed), Header: nats.Header{subject.HdrTxnID: []string{"u-1"}}, Data: []byte{1, 2, 3}}
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	direct, err := dec.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	leader, err := l.atLeader(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if leader.Subject != direct.Subject || leader.Sequence != 1 || string(leader.Data) != string(direct.Data) ||
		leader.Header.Get(subject.HdrTxnID) != "u-1" || !leader.Time.Equal(direct.Time) {
		t.Errorf("leader %+v, direct %+v", leader, direct)
	}
	if _, err := l.atLeader(ctx, 7); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("atLeader(7) = %v, want ErrMsgNotFound", err)
	}
	if _, err := l.getMsg(ctx, 7); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("getMsg(7) = %v, want ErrMsgNotFound", err)
	}
}
