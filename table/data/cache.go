package data

import (
	"container/list"
	"sync"
)

// cache is a least-recently-used map from file path to an immutable decoded
// file, bounded by the total cost of its entries. Files never change once
// written, so an entry never goes stale. It is safe for concurrent use.
type cache[V any] struct {
	mu    sync.Mutex
	max   int64
	used  int64
	order *list.List // front is most recently used; elements hold *cacheEntry[V]
	byKey map[string]*list.Element
}

type cacheEntry[V any] struct {
	key  string
	val  V
	cost int64
}

// newCache returns a cache holding entries of total cost at most max; with
// max ≤ 0 it holds nothing.
func newCache[V any](max int64) *cache[V] {
	return &cache[V]{max: max, order: list.New(), byKey: make(map[string]*list.Element)}
}

func (c *cache[V]) get(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*cacheEntry[V]).val, true
}

// put adds an entry unless it alone exceeds the bound, then evicts the least
// recently used entries until the total fits.
func (c *cache[V]) put(key string, val V, cost int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cost > c.max {
		return
	}
	if el, ok := c.byKey[key]; ok {
		c.used -= el.Value.(*cacheEntry[V]).cost
		c.order.Remove(el)
	}
	c.byKey[key] = c.order.PushFront(&cacheEntry[V]{key: key, val: val, cost: cost})
	c.used += cost
	for c.used > c.max {
		el := c.order.Back()
		e := el.Value.(*cacheEntry[V])
		c.order.Remove(el)
		delete(c.byKey, e.key)
		c.used -= e.cost
	}
}

// len returns the number of entries.
func (c *cache[V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
