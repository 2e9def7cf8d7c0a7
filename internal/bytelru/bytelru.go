// Package bytelru is a least-recently-used map bounded by the bytes its
// values are said to hold: the one home of the worker's per-session caches
// (the lanes' transcripts, the runner's converted histories, the provider
// adapters' wire messages: provider/internal/wirecache), each of which keeps a session's
// state between its turns so a turn's cost does not grow with the session.
//
// A Cache is not safe for concurrent use: its users hold their own lock,
// under which they do more than one call.
package bytelru

import "container/list"

// EntryOverhead is what the cache charges each kept value besides the
// bytes its user says it holds and its key: the value's own struct, its
// list element and its map slot. It is what bounds a cache of many tiny or
// empty values (a session of no messages still costs memory).
const EntryOverhead = 256

// Cache maps keys to values, keeping the most recently used ones within a
// byte budget. Each value is charged its size, its key's length and
// EntryOverhead. A value charged more than half the budget is never kept:
// it would evict nearly every other one each time it is put.
type Cache[V any] struct {
	max, size int
	lru       list.List // of *item[V], most recently used first
	items     map[string]*list.Element
}

type item[V any] struct {
	key  string
	val  V
	size int
}

// New returns a cache of at most maxBytes.
func New[V any](maxBytes int) *Cache[V] {
	return &Cache[V]{max: maxBytes, items: map[string]*list.Element{}}
}

// Size returns the bytes charged to the values kept, and the budget.
func (c *Cache[V]) Size() (charged, max int) { return c.size, c.max }

// Get returns the key's value and makes it the most recently used.
func (c *Cache[V]) Get(key string) (V, bool) {
	e := c.items[key]
	if e == nil {
		var zero V
		return zero, false
	}
	c.lru.MoveToFront(e)
	return e.Value.(*item[V]).val, true
}

// Peek returns the key's value, leaving the order as it is.
func (c *Cache[V]) Peek(key string) (V, bool) {
	e := c.items[key]
	if e == nil {
		var zero V
		return zero, false
	}
	return e.Value.(*item[V]).val, true
}

// Take removes the key's value and returns it.
func (c *Cache[V]) Take(key string) (V, bool) {
	v, ok := c.Peek(key)
	if ok {
		c.Remove(key)
	}
	return v, ok
}

// Put keeps val, said to hold size bytes, as the key's value and the most
// recently used, then drops the least recently used values beyond the
// budget. It reports whether val is kept: a value charged over half the
// budget (size + len(key) + EntryOverhead) is not, and the key then has
// none.
func (c *Cache[V]) Put(key string, val V, size int) bool {
	c.Remove(key)
	size += len(key) + EntryOverhead
	if size > c.max/2 {
		return false
	}
	c.items[key] = c.lru.PushFront(&item[V]{key: key, val: val, size: size})
	c.size += size
	for c.size > c.max {
		c.Remove(c.lru.Back().Value.(*item[V]).key)
	}
	return true
}

// Remove drops the key's value, if any.
func (c *Cache[V]) Remove(key string) {
	e := c.items[key]
	if e == nil {
		return
	}
	c.size -= e.Value.(*item[V]).size
	c.lru.Remove(e)
	delete(c.items, key)
}
