package refused

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// TestAddrRefuses: a dial is refused, and nobody else can listen on the
// port while the test holds it.
func TestAddrRefuses(t *testing.T) {
	t.Parallel()
	addr := Addr(t)
	if _, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want connection refused", addr, err)
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Fatalf("another listener took %s", addr)
	}
}
