package producer

import (
	"github.com/nats-io/nats.go"

	"cellguard/internal/natsconn"
)

// InboxOption returns the nats.go option that gives a connection the
// inbox prefix of the user whose credentials file (an nkey seed or a
// .creds file) is at path: _INBOX_<its public nkey>, the only inbox the
// shipped accounts let that user subscribe to. Dial with it:
//
//	auth, err := nats.NkeyOptionFromSeed("worker.nk")
//	inbox, err := producer.InboxOption("worker.nk")
//	nc, err := nats.Connect(url, auth, inbox)
//	pc, err := producer.New(nc, producer.Config{})
func InboxOption(path string) (nats.Option, error) { return natsconn.InboxOption(path) }
