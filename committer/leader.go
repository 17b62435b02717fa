package committer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A dataset whose log does not replay is read again at the stream
// leader before it is stopped (status.go, failed). The leader itself may
// be the replica that lost the records: JetStream does not repair a
// damaged block file, and Raft elects that node like any other (its Raft
// log is whole, only its store lost records). So when the leader's
// records are refused too, the committer asks the leader of CG_DEC to
// step down in favour of a replica no read of the dataset has been
// refused at, and loads the dataset again there; only when every replica
// has led and been refused does the dataset stop. Each dataset tries each
// replica at most once (retryUntrusted), and the committer steps the
// leader down at most once per stepdownSettle, however many datasets ask:
// the others read at whichever leader that made.

// stepdownSettle is how long after a stepdown another is not asked for.
const stepdownSettle = 10 * time.Second

// maxUntrustedRetries bounds the loads a dataset makes, after its log was
// first refused, before it stops.
const maxUntrustedRetries = 10

// stepdowns serialises the committer's stepdowns of CG_DEC's leader.
type stepdowns struct {
	mu   sync.Mutex
	last time.Time
}

// retryUntrusted decides whether a dataset whose log was refused as
// untrusted (err) is loaded again instead of stopped, and after how long;
// it prepares the next load: every read at the stream leader, and, when
// the leader's records were refused already, another leader.
func (w *worker) retryUntrusted(ctx context.Context, err error) (bool, time.Duration) {
	c := w.c
	if !w.leaderReads {
		w.leaderReads = true
		c.metrics.leaderRereads.Inc()
		c.log.Warn("the decision log does not replay as read; loading the dataset again with every read at the stream leader",
			"dataset", w.ds, "err", err)
		return true, 0
	}
	if ctx.Err() != nil {
		return true, 0 // stopping: the next owner loads the dataset again
	}
	if w.untrustedRetries++; w.untrustedRetries > maxUntrustedRetries {
		return false, 0
	}
	ictx, cancel := context.WithTimeout(ctx, logRequestTimeout)
	info, ierr := c.dec.Info(ictx)
	cancel()
	if ierr != nil {
		return true, time.Second // counted: a few more tries, then the dataset stops
	}
	if info.Cluster == nil || info.Config.Replicas <= 1 {
		return false, 0 // one replica: its records are the log's
	}
	if w.refusedAt == nil {
		w.refusedAt = map[string]bool{}
	}
	leader := info.Cluster.Leader
	if leader != "" {
		w.refusedAt[leader] = true
	}
	c.stepdown.mu.Lock()
	defer c.stepdown.mu.Unlock()
	if wait := stepdownSettle - time.Since(c.stepdown.last); wait > 0 {
		return true, wait // a leader was just moved: read at the new one once it settled
	}
	next, waiting := "", false
	for _, p := range info.Cluster.Replicas {
		switch {
		case w.refusedAt[p.Name]:
		case p.Current && !p.Offline:
			next = p.Name
		default:
			waiting = true // not refused, but down or catching up now
		}
		if next != "" {
			break
		}
	}
	if next == "" && waiting {
		return true, time.Second // counted: read again once a replica not refused yet can lead
	}
	if next == "" {
		return false, 0 // every replica led and was refused: the log disagrees with itself
	}
	c.log.Warn("the stream leader's records of the dataset do not replay either; asking another replica of the decision log to lead",
		"dataset", w.ds, "leader", leader, "preferred", next, "err", err)
	c.metrics.leaderRereads.Inc()
	if serr := c.stepDownDec(ctx, next); serr != nil {
		c.log.Warn("stepping the decision log's leader down failed", "dataset", w.ds, "err", serr)
	}
	c.stepdown.last = time.Now()
	return true, 0
}

// stepDownDec asks CG_DEC's leader to hand over to the replica named
// preferred and waits, bounded, until some other node leads.
func (c *Committer) stepDownDec(ctx context.Context, preferred string) error {
	req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": preferred}})
	rctx, cancel := context.WithTimeout(ctx, logRequestTimeout)
	defer cancel()
	resp, err := c.js.Conn().RequestWithContext(rctx, "$JS.API.STREAM.LEADER.STEPDOWN."+c.sc.DecStream(), req)
	if err != nil {
		return err
	}
	var r struct {
		Success bool `json:"success"`
		Error   *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return err
	}
	if r.Error != nil {
		return errors.New(r.Error.Description)
	}
	wctx, wcancel := context.WithTimeout(ctx, stepdownSettle)
	defer wcancel()
	for {
		ictx, icancel := context.WithTimeout(wctx, logRequestTimeout)
		info, err := c.dec.Info(ictx)
		icancel()
		if err == nil && info.Cluster != nil && info.Cluster.Leader == preferred {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("no leader at %s after the stepdown", preferred)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
