package bytelru

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// keys returns the kept keys, most recently used first.
func keys[V any](c *Cache[V]) []string {
	var out []string
	for e := c.lru.Front(); e != nil; e = e.Next() {
		out = append(out, e.Value.(*item[V]).key)
	}
	return out
}

// charge1 is what a one-byte key costs besides its value's size.
const charge1 = 1 + EntryOverhead

// TestCache: values are kept most recently used first within the budget
// (each charged its size, key and EntryOverhead), a Get moves one to the
// front and a Peek does not, a value charged over half the budget is never kept (and drops the
// key's older one), and Take and Remove forget.
func TestCache(t *testing.T) {
	t.Parallel()
	c := New[int](3*(30+charge1) + 10)
	for i, k := range []string{"a", "b", "c"} {
		if !c.Put(k, i, 30) {
			t.Fatalf("put %s refused", k)
		}
	}
	if got := keys(c); !slices.Equal(got, []string{"c", "b", "a"}) || c.size != 3*(30+charge1) {
		t.Fatalf("order %v, size %d", got, c.size)
	}
	if v, ok := c.Get("a"); !ok || v != 0 {
		t.Fatalf("get a = %d, %v", v, ok)
	}
	if v, ok := c.Peek("b"); !ok || v != 1 {
		t.Fatalf("peek b = %d, %v", v, ok)
	}
	c.Put("d", 3, 30) // over the budget: the least recently used (b) goes
	if got := keys(c); !slices.Equal(got, []string{"d", "a", "c"}) || c.size != 3*(30+charge1) {
		t.Fatalf("after an eviction: order %v, size %d", got, c.size)
	}
	if c.Put("a", 9, c.max/2-charge1+1) {
		t.Fatal("a value charged over half the budget was kept")
	}
	if _, ok := c.Peek("a"); ok || len(c.items) != 2 || c.size != 2*(30+charge1) {
		t.Fatalf("the refused key kept its old value (len %d, size %d)", len(c.items), c.size)
	}
	if v, ok := c.Take("c"); !ok || v != 2 || slices.Contains(keys(c), "c") {
		t.Fatalf("take c = %d, %v; kept %v", v, ok, keys(c))
	}
	if _, ok := c.Take("c"); ok {
		t.Fatal("took c twice")
	}
	if !c.Put("e", 4, c.max/2-charge1) || !slices.Equal(keys(c), []string{"e", "d"}) {
		t.Fatalf("a value charged exactly half the budget: kept %v", keys(c))
	}
	c.Remove("e")
	c.Remove("e")
	if got := keys(c); !slices.Equal(got, []string{"d"}) || c.size != 30+charge1 {
		t.Fatalf("after removes: %v, size %d", got, c.size)
	}
}

// TestCacheTinyValuesBounded: values said to hold nothing still cost their
// key and EntryOverhead, so a flood of them stays within the budget, and a
// key alone can be too large to keep.
func TestCacheTinyValuesBounded(t *testing.T) {
	t.Parallel()
	const budget = 64 << 10
	c := New[struct{}](budget)
	for i := range 100_000 {
		c.Put(fmt.Sprintf("s%05d", i), struct{}{}, 0)
		if c.size > budget {
			t.Fatalf("after %d puts: %d bytes charged, the budget is %d", i+1, c.size, budget)
		}
	}
	if want := budget / (6 + EntryOverhead); len(c.items) != want {
		t.Fatalf("%d empty values kept, want %d (budget / (key + EntryOverhead))", len(c.items), want)
	}
	if _, ok := c.Get("s99999"); !ok {
		t.Fatal("the newest value is not kept")
	}
	if c.Put(strings.Repeat("k", budget/2), struct{}{}, 0) {
		t.Fatal("a key over half the budget was kept")
	}
}
