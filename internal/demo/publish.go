package demo

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"cellguard/internal/declog"
	"cellguard/internal/embedded"
	lancepub "cellguard/internal/publish"
	"cellguard/internal/subject"
)

// demoPublisher is the publisher `serve` runs, run inside the demo: it
// follows the decision log and lays every committed version of the demo
// dataset out as a Lance version in the dataset's location.
type demoPublisher struct {
	nc     *nats.Conn
	mgr    *lancepub.Manager
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startDemoPublisher(ctx context.Context, srv *embedded.Server) (*demoPublisher, error) {
	nc, err := srv.Connect("committer", "cellguard-publisher")
	if err != nil {
		return nil, err
	}
	_, l, err := declog.OpenWhenReady(ctx, nc, subject.DefaultPrefix)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("publisher: %w", err)
	}
	p := &demoPublisher{nc: nc, mgr: lancepub.NewManager(l, lancepub.ManagerOptions{Logger: slog.New(slog.DiscardHandler)})}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_ = p.mgr.Run(runCtx)
	}()
	return p, nil
}

// waitFor waits until version head of the demo dataset is published, or
// publishing stopped, or within has passed; it returns the last version
// published.
func (p *demoPublisher) waitFor(ctx context.Context, head uint64, within time.Duration) (uint64, error) {
	deadline := time.Now().Add(within)
	for {
		var published uint64
		if pub, ok := p.mgr.Publisher(demoDataset); ok {
			if err := pub.Stopped(); err != nil {
				return pub.Published(), err
			}
			published = pub.Published()
		}
		if published >= head {
			return published, nil
		}
		if time.Now().After(deadline) {
			return published, fmt.Errorf("version %d not published within %v", head, within)
		}
		select {
		case <-ctx.Done():
			return published, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (p *demoPublisher) stop() {
	p.cancel()
	p.wg.Wait()
	p.nc.Close()
}
