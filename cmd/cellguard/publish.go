package main

import (
	"context"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"cellguard/internal/declog"
	lancepub "cellguard/internal/publish"
)

// startPublishing runs the publisher (a follower of the decision log that
// lays every committed version of a dataset with a location out as a
// Lance version) beside the committer, until ctx ends or the returned
// stop is called. It waits for the decision log, which the committer
// creates, to exist.
func startPublishing(ctx context.Context, nc *nats.Conn, prefix string, reg prometheus.Registerer, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := runPublishing(ctx, nc, prefix, reg, log); err != nil && ctx.Err() == nil {
			log.Error("publishing stopped", "err", err)
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}

func runPublishing(ctx context.Context, nc *nats.Conn, prefix string, reg prometheus.Registerer, log *slog.Logger) error {
	met, err := lancepub.NewMetrics(reg)
	if err != nil {
		return err
	}
	_, l, err := declog.OpenWhenReady(ctx, nc, prefix)
	if err != nil {
		return err
	}
	return lancepub.NewManager(l, lancepub.ManagerOptions{Logger: log, Metrics: met}).Run(ctx)
}
