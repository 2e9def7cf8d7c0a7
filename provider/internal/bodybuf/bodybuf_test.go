package bodybuf

import "testing"

// TestGetPut: Get has room for what is asked, small bodies never come
// from the pools, and a buffer put back is one a later Get of its class
// may return (never one too small).
func TestGetPut(t *testing.T) {
	for _, n := range []int{0, 1, MinPooled - 1, MinPooled, MinPooled + 1, 100 << 10, 1 << 20, 1<<20 + 1, 100 << 20} {
		b := Get(n)
		if len(b) != 0 || cap(b) < n {
			t.Fatalf("Get(%d): len %d cap %d", n, len(b), cap(b))
		}
		Put(append(b, 'x'))
	}
	if Release(make([]byte, MinPooled-1)) != nil || Release(make([]byte, 0, MinPooled)) == nil {
		t.Error("Release: a body too small to keep is kept, or one to keep is not")
	}
	// Whatever a pool hands back fits: a buffer of an odd capacity goes
	// to the class below it.
	Put(make([]byte, 10, 3*MinPooled))
	for range 100 {
		if b := Get(4 * MinPooled); cap(b) < 4*MinPooled {
			t.Fatalf("Get(%d): cap %d", 4*MinPooled, cap(b))
		}
		if b := Get(2*MinPooled + 1); cap(b) < 2*MinPooled+1 {
			t.Fatalf("Get(%d): cap %d", 2*MinPooled+1, cap(b))
		}
	}
}
