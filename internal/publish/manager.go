package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
	"cellguard/internal/retry"
	"cellguard/internal/subject"
)

// Manager runs one Publisher for every dataset of the log whose
// configuration has a location. It finds datasets by listing the log's
// committed subjects every DiscoverEvery, so datasets created later are
// picked up. A publisher that fails for a transient reason is restarted
// (it resumes from storage); one that stopped on a foreign or
// unpublishable version stays stopped until the process restarts. A
// dataset whose log holds its tombstone is not published, and its
// running publisher is stopped when discovery finds the tombstone.
type Manager struct {
	log  *declog.Log
	opts ManagerOptions

	mu      sync.Mutex
	running map[string]*Publisher
	cancels map[string]context.CancelFunc // ends a dataset's serve
	deleted map[string]bool               // datasets found deleted: never published again
}

// ManagerOptions tunes a Manager.
type ManagerOptions struct {
	Logger        *slog.Logger
	Metrics       *Metrics
	DiscoverEvery time.Duration // default 1s
}

// NewManager returns a Manager over l.
func NewManager(l *declog.Log, opts ManagerOptions) *Manager {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.DiscoverEvery == 0 {
		opts.DiscoverEvery = time.Second
	}
	return &Manager{log: l, opts: opts, running: map[string]*Publisher{}, cancels: map[string]context.CancelFunc{}, deleted: map[string]bool{}}
}

// Publisher returns the running publisher of ds, if any. A dataset that
// is claimed but whose publisher is still starting has none yet.
func (m *Manager) Publisher(ds string) (*Publisher, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.running[ds]
	return p, p != nil
}

// Deleted reports whether the manager found ds deleted (its tombstone
// in the log): it publishes nothing more of it.
func (m *Manager) Deleted(ds string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deleted[ds]
}

// Run discovers datasets and publishes them until ctx ends. Every
// goroutine it starts has exited when it returns.
func (m *Manager) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(m.opts.DiscoverEvery)
	defer tick.Stop()
	for {
		if err := m.discover(ctx, &wg); err != nil && ctx.Err() == nil {
			m.opts.Logger.Warn("publish: discover datasets", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func (m *Manager) discover(ctx context.Context, wg *sync.WaitGroup) error {
	sc := m.log.Scheme()
	info, err := m.log.Stream().Info(ctx, streamSubjects(sc.DecAll()))
	if err != nil {
		return err
	}
	deleted := map[string]bool{}
	for subj := range info.State.Subjects {
		if ds, o, err := sc.ParseDec(subj); err == nil && o == subject.Deleted {
			deleted[ds] = true
		}
	}
	for subj := range info.State.Subjects {
		ds, o, err := sc.ParseDec(subj)
		if err != nil || o != subject.Committed {
			continue
		}
		m.mu.Lock()
		_, seen := m.running[ds]
		if !seen {
			m.running[ds] = nil // claimed; filled in by serve
		}
		if deleted[ds] {
			// A tombstone: stop publishing for good (the claim stays).
			m.deleted[ds] = true
			if cancel := m.cancels[ds]; cancel != nil {
				cancel()
			}
			m.mu.Unlock()
			continue
		}
		var sctx context.Context
		if !seen {
			var cancel context.CancelFunc
			sctx, cancel = context.WithCancel(ctx)
			m.cancels[ds] = cancel
		}
		m.mu.Unlock()
		if !seen {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m.serve(sctx, ds)
			}()
		}
	}
	return nil
}

// serve publishes ds until ctx ends or its publishing stops for good.
func (m *Manager) serve(ctx context.Context, ds string) {
	log := m.opts.Logger.With("dataset", ds)
	b := retry.Backoff{Initial: 100 * time.Millisecond, Max: 10 * time.Second, Jitter: true}
	for attempt := 0; ctx.Err() == nil; attempt++ {
		err := m.serveOnce(ctx, ds)
		switch {
		case err == nil || ctx.Err() != nil:
			return
		case errors.Is(err, ErrForeignVersion) || errors.Is(err, ErrUnpublishable) || errors.Is(err, ErrDatasetDeleted):
			return // logged and counted by the publisher
		}
		log.Warn("publisher failed; restarting", "err", err)
		if retry.Sleep(ctx, b.Delay(attempt)) != nil {
			return
		}
	}
}

// serveOnce reads the dataset's configuration and runs its publisher. It
// returns nil for a dataset that is not published.
func (m *Manager) serveOnce(ctx context.Context, ds string) error {
	// Before opening (and creating) the location: a purged directory of
	// a deleted dataset stays gone.
	if _, ok, err := m.log.Tombstone(ctx, ds); err != nil {
		return err
	} else if ok {
		m.mu.Lock()
		m.deleted[ds] = true
		m.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrDatasetDeleted, ds)
	}
	cfg, err := m.log.Config(ctx, ds)
	if err != nil {
		return err
	}
	if cfg.GetLocation() == "" {
		return nil
	}
	loc, err := OpenLocation(ctx, cfg.GetLocation(), true)
	if err != nil {
		return err
	}
	defer loc.Close()
	p := NewPublisher(m.log, ds, cfg, loc, PublisherOptions{Logger: m.opts.Logger, Metrics: m.opts.Metrics})
	m.mu.Lock()
	m.running[ds] = p
	m.mu.Unlock()
	return p.Run(ctx)
}

func streamSubjects(filter string) jetstream.StreamInfoOpt {
	return jetstream.WithSubjectFilter(filter)
}
