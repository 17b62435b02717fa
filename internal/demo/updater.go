package demo

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"cellguard/producer"
)

// demoUpdater keeps changing x: new values for a few rows (most of the
// time), x+1 on every row, and deletes. Every change of x is a new x
// column file for the fragment, committed as a column rewrite (Update
// REWRITE_COLUMNS) or a column replacement (DataReplacement), never as a
// data overlay: Lance 8 (LanceDB 0.31) has no overlay reader, so a dataset
// served to it must not hold overlays. It retries its own rejected
// transactions with RetryWithRecompute.
type demoUpdater struct {
	d    *demoRun
	rng  *rand.Rand
	pc   *producer.Client
	noop bool // the last build found nothing to do
}

func (u *demoUpdater) run(ctx context.Context) error {
	nc, err := u.d.srv.Connect("worker", "demo-updater")
	if err != nil {
		return err
	}
	defer nc.Close()
	if u.pc, err = producer.New(nc, producer.Config{}); err != nil {
		return err
	}
	defer u.pc.Close()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(jitter(u.rng, u.d.cfg.UpdateEvery)):
		}
		kind := u.pick()
		u.noop = false
		_, err := u.pc.RetryWithRecompute(ctx, demoDataset, func(ctx context.Context, snap *producer.Snapshot) (*producer.Txn, error) {
			return u.build(ctx, snap, kind)
		}, producer.MaxAttempts(10), producer.OnRetry(func(int, error) { u.d.stats.updateRetry.Add(1) }))
		switch {
		case err == nil && !u.noop:
			u.d.stats.update(kind)
		case err == nil:
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, producer.ErrRejected):
			u.d.note("updater: %s gave up: %v", kind, err)
		default:
			return err
		}
	}
}

func (u *demoUpdater) pick() string {
	switch r := u.rng.IntN(100); {
	case r < 65:
		return "point"
	case r < 75:
		return "replace"
	case r < 85:
		return "rewrite"
	default:
		return "delete"
	}
}

// build makes one update of the given kind from snap.
func (u *demoUpdater) build(ctx context.Context, snap *producer.Snapshot, kind string) (*producer.Txn, error) {
	m := snap.Manifest()
	var ids []uint64
	for f := range m.Fragments() {
		if f.LiveRows() > 0 {
			ids = append(ids, f.ID())
		}
	}
	if len(ids) == 0 {
		u.noop = true
		return nil, nil
	}
	fid := ids[u.rng.IntN(len(ids))]
	frag, _ := m.Fragment(fid)
	txn := snap.NewTxn()
	store := u.d.store
	switch kind {
	case "point", "replace", "rewrite":
		// A new x column computed from what was read, so the read is
		// protected like a worker's: "point" gives a few live rows new
		// values and keeps the others, "replace" and "rewrite" set
		// x' = x + 1 on every live row.
		b, err := txn.Read(ctx, store, fid, FieldX)
		if err != nil {
			return nil, err
		}
		xs := make([]int64, frag.PhysicalRows())
		col := b.Columns[FieldX].(*array.Int64)
		for i, off := range b.Offsets {
			xs[off] = col.Value(i)
			if kind != "point" {
				xs[off]++
			}
		}
		if kind == "point" {
			for _, off := range u.sample(b.Offsets, 1+u.rng.IntN(4)) {
				xs[off] = u.rng.Int64N(1_000_000)
			}
		}
		file, err := store.WriteColumns(ctx, m.Schema(), frag, map[int32]arrow.Array{FieldX: Int64Array(xs, nil)})
		if err != nil {
			return nil, err
		}
		if kind == "replace" {
			return txn.ReplaceColumns(fid, file), nil
		}
		return txn.RewriteColumns(fid, file), nil
	default: // delete a few rows, keeping at least half of the fragment
		if frag.LiveRows()*2 <= frag.PhysicalRows() {
			u.noop = true
			return nil, nil
		}
		b, err := store.ReadFragment(ctx, m, fid, []int32{FieldX})
		if err != nil {
			return nil, err
		}
		if err := txn.DeleteRows(ctx, store, fid, u.sample(b.Offsets, 1+u.rng.IntN(3))...); err != nil {
			return nil, err
		}
		return txn, nil
	}
}

// sample picks up to n distinct offsets.
func (u *demoUpdater) sample(offsets []uint32, n int) []uint32 {
	n = min(n, len(offsets))
	picked := make([]uint32, 0, n)
	for len(picked) < n {
		o := offsets[u.rng.IntN(len(offsets))]
		if !slices.Contains(picked, o) {
			picked = append(picked, o)
		}
	}
	return picked
}
