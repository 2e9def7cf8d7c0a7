package sandbox

import (
	"encoding/binary"
	"runtime"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompData is struct seccomp_data as the filter reads it. The x/net/bpf
// VM loads words in network byte order while the kernel loads them in the
// machine's, so each word is written big-endian here at the offset the
// kernel reads it from on a little-endian machine (an argument's low half
// first).
func seccompData(arch, nr uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[offNr:], nr)
	binary.BigEndian.PutUint32(b[offArch:], arch)
	for i, a := range args {
		binary.BigEndian.PutUint32(b[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(b[16+8*i+4:], uint32(a>>32))
	}
	return b
}

func TestSeccompFilter(t *testing.T) {
	t.Parallel()
	const (
		allow  = unix.SECCOMP_RET_ALLOW
		eacces = unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES)
		enosys = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
		kill   = unix.SECCOMP_RET_KILL_PROCESS
	)
	// The system call numbers are constants of this build: the filter is
	// built for the architecture it runs on.
	a, ok := archs[runtime.GOARCH]
	if !ok {
		t.Skipf("no seccomp filter for %s", runtime.GOARCH)
	}
	insns, err := seccompFilter(runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(insns)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		data []byte
		want uint32
	}{
		{"socket AF_UNIX", seccompData(a.audit, unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM), eacces},
		{"socket AF_UNIX with flags", seccompData(a.audit, unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC), eacces},
		// The kernel reads an int: high bits do not hide the family.
		{"socket AF_UNIX, high bits set", seccompData(a.audit, unix.SYS_SOCKET, 0xdeadbeef<<32|unix.AF_UNIX, unix.SOCK_STREAM), eacces},
		{"socket AF_INET", seccompData(a.audit, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM), allow},
		{"socket AF_INET6", seccompData(a.audit, unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM), allow},
		{"socket AF_NETLINK", seccompData(a.audit, unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW), allow},
		{"socketpair stream", seccompData(a.audit, unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC), allow},
		{"socketpair seqpacket", seccompData(a.audit, unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_SEQPACKET), allow},
		// A datagram pair could sendto(2) a socket's path.
		{"socketpair dgram", seccompData(a.audit, unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_DGRAM), eacces},
		{"socketpair dgram nonblocking", seccompData(a.audit, unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK), eacces},
		{"socketpair raw (a datagram socket)", seccompData(a.audit, unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_RAW), eacces},
		{"socketpair dgram, high bits set", seccompData(a.audit, unix.SYS_SOCKETPAIR, 1<<40|unix.AF_UNIX, 1<<33|unix.SOCK_DGRAM), eacces},
		{"io_uring_setup", seccompData(a.audit, unix.SYS_IO_URING_SETUP, 8, 0), enosys},
		{"io_uring_enter", seccompData(a.audit, unix.SYS_IO_URING_ENTER), enosys},
		{"io_uring_register", seccompData(a.audit, unix.SYS_IO_URING_REGISTER), enosys},
		{"connect", seccompData(a.audit, unix.SYS_CONNECT, 3, 0, 110), allow},
		{"openat", seccompData(a.audit, unix.SYS_OPENAT), allow},
		{"execve", seccompData(a.audit, unix.SYS_EXECVE), allow},
		// Another ABI (i386's socketcall hides the call it makes).
		{"another architecture", seccompData(unix.AUDIT_ARCH_I386, 102, 1), kill},
	}
	if a.x32 {
		tests = append(tests, struct {
			name string
			data []byte
			want uint32
		}{"x32 ABI", seccompData(a.audit, x32SyscallBit|unix.SYS_SOCKET, unix.AF_UNIX), kill})
	}
	for _, tt := range tests {
		got, err := vm.Run(tt.data)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if uint32(got) != tt.want {
			t.Errorf("%s: %#x, want %#x", tt.name, uint32(got), tt.want)
		}
	}
	if _, err := seccompFilter("s390x"); err == nil {
		t.Error("a filter for an architecture with socketcall")
	}
}
