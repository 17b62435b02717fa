// Package events is the subscriber SDK of cellguard: follow a dataset's
// committed versions, and consume rejected transactions as a shared work
// queue.
//
// # Versions
//
// A Subscriber delivers the committed versions of one dataset in order,
// from any version: first the history (replayed from the decision log),
// then live. Each Committed carries the transaction as committed, the
// manifests before and after, and a Summary of what changed: fragments
// added, removed and updated, the fields written per fragment, rows added
// and deleted.
//
//	sub, err := events.NewSubscriber(nc, events.Config{Dataset: "orders", From: 1})
//	err = sub.Run(ctx, func(ctx context.Context, c *events.Committed) error {
//		stale := c.Summary.FragmentsWriting(xField) // y must be recomputed there
//		…
//		return nil
//	})
//
// With Config.Durable the server remembers the last version handled (a
// durable consumer with one version in flight, so order holds across
// redeliveries); without it the subscriber reads the log live from
// Config.From on every Run, through an ordered ephemeral consumer that is
// replaced if it stalls.
//
// # Rejections
//
// Rejections delivers rejected transactions with their reason, violations
// and culprits. With RejectionsConfig.Queue it is a work queue: every
// worker of a pool runs the same queue name, each rejection goes to one
// of them, a handler that returns nil acknowledges it, one that fails hands
// it back after RetryDelay, and one whose worker dies without answering is
// delivered to another worker after AckWait. So a rejected job is
// recomputed even if the worker that staged it is gone. Without Queue it is
// an ephemeral feed that only observes (cellguard events tail): a live read
// of the log, like a subscriber's, whose consumer is replaced if it stalls.
//
// # Ordering and lifetimes
//
// Run calls its handler on one goroutine, one event at a time, and blocks
// until ctx ends (it then returns nil) or the handler or the feed fails.
// Every goroutine Run starts has exited when it returns.
//
// # Caveats
//
// A rejected record carries the rejected transaction only if the
// committer keeps its body (Rejected.Txn reports it); otherwise a
// recompute worker works from the violations (fragments and fields) and
// from the versions it follows.
package events
