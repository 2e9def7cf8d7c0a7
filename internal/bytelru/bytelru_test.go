package bytelru

import (
	"slices"
	"testing"
)

func keys[V any](c *Cache[V]) []string {
	var out []string
	for e := c.lru.Front(); e != nil; e = e.Next() {
		out = append(out, e.Value.(*item[V]).key)
	}
	return out
}

// TestCache: values are kept most recently used first within the budget,
// a Get moves one to the front and a Peek does not, a value over half the
// budget is never kept (and drops the key's older one), and Take removes.
func TestCache(t *testing.T) {
	c := New[int](100)
	for i, k := range []string{"a", "b", "c"} {
		if !c.Put(k, i, 30) {
			t.Fatalf("put %s refused", k)
		}
	}
	if got := keys(c); !slices.Equal(got, []string{"c", "b", "a"}) || c.Size() != 90 {
		t.Fatalf("order %v, size %d", got, c.Size())
	}
	if v, ok := c.Get("a"); !ok || v != 0 {
		t.Fatalf("get a = %d, %v", v, ok)
	}
	if _, ok := c.Peek("b"); !ok {
		t.Fatal("peek b missed")
	}
	c.Put("d", 3, 30) // 120 > 100: the least recently used (b) goes
	if got := keys(c); !slices.Equal(got, []string{"d", "a", "c"}) || c.Size() != 90 {
		t.Fatalf("after an eviction: order %v, size %d", got, c.Size())
	}
	if c.Put("a", 9, 51) {
		t.Fatal("a value over half the budget was kept")
	}
	if _, ok := c.Peek("a"); ok || c.Len() != 2 || c.Size() != 60 {
		t.Fatalf("the refused key kept its old value (len %d, size %d)", c.Len(), c.Size())
	}
	if v, ok := c.Take("c"); !ok || v != 2 || c.Len() != 1 || c.Size() != 30 {
		t.Fatalf("take c = %d, %v; len %d, size %d", v, ok, c.Len(), c.Size())
	}
	if _, ok := c.Take("c"); ok {
		t.Fatal("took c twice")
	}
}
