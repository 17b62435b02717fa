// Package embedded is the in-process JetStream server of serve, demo and
// bench, and when its file store reaches the disk.
package embedded

// When the embedded server's file store reaches the disk. JetStream's own
// default acknowledges a publish once it is written to the OS and flushes
// in the background every two minutes: a power failure then erases
// decisions a worker was told are committed, while the Lance manifests
// the publisher wrote survive. cellguard's default syncs every write
// before it is acknowledged (docs/design.md, "Durability").

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
)

// SyncAlways is the --nats-sync value of the default policy.
const SyncAlways = "always"

// SyncPolicy is when the file store syncs: always (before every
// acknowledgement), or in the background every interval.
type SyncPolicy struct {
	always   bool
	interval time.Duration
}

// ParseSync reads a --nats-sync value: "always", or a Go duration for
// JetStream's background flush (an opt-out: "2m" is JetStream's default).
func ParseSync(s string) (SyncPolicy, error) {
	if s == SyncAlways {
		return Always(), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return SyncPolicy{}, fmt.Errorf("--nats-sync %q: want %q or a positive duration such as 2m (unsafe: acknowledged decisions can be lost to a power failure)", s, SyncAlways)
	}
	return SyncPolicy{interval: d}, nil
}

func (p SyncPolicy) String() string {
	if p.always {
		return SyncAlways
	}
	return p.interval.String()
}

// Apply sets the policy on a server's options.
func (p SyncPolicy) Apply(opts *server.Options) {
	opts.SyncAlways = p.always
	if !p.always {
		opts.SyncInterval = p.interval
	}
}

// Announce logs the policy (a warning when it is not always) and exports
// it as cellguard_nats_sync_always: 1 when every write is synced before it
// is acknowledged, 0 when the operator opted out.
func (p SyncPolicy) Announce(log *slog.Logger, reg prometheus.Registerer) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cellguard_nats_sync_always",
		Help: "1 when the embedded JetStream server syncs every write to disk before acknowledging it; 0 when --nats-sync opted out (a power failure can lose acknowledged decisions).",
	})
	if p.always {
		g.Set(1)
	} else {
		log.Warn("UNSAFE: --nats-sync is not 'always': the embedded JetStream server acknowledges decisions before they are on disk; a power failure or OS crash can lose acknowledged decisions and leave the decision log behind the published Lance table (repair: cellguard dataset verify / repair)",
			"sync_interval", p.interval.String())
	}
	if reg != nil {
		reg.MustRegister(g)
	}
}

// Always is the default policy: every write synced before it is
// acknowledged.
func Always() SyncPolicy { return SyncPolicy{always: true} }
