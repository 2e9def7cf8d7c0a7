// Package refused gives tests an address that refuses connections: a TCP
// port on 127.0.0.1 bound by a socket that never listens, held until the
// test ends. Closing a listener and dialing its address, the usual way,
// races every other test of the run that listens on a random port: the
// kernel may hand the freed port to one of them, and the "refused"
// connection then reaches that server and gets its answer.
package refused

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// Addr returns "127.0.0.1:<port>" where connections are refused until the
// test ends.
func Addr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("refused: socket: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("refused: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("refused: getsockname: %v", err)
	}
	in, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		t.Fatalf("refused: bound to %T", sa)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(in.Port))
}
