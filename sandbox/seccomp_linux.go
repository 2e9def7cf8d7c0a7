package sandbox

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The seccomp filter is a deny list, installed by the helper as its last
// step before execve: Landlock (ABI 7 and before) does not mediate
// connect(2) or sendto(2) on a UNIX socket's path, so a command that could
// create an AF_UNIX socket could talk to every socket it can name (docker,
// systemd, D-Bus...) as whatever uid it runs as. Seccomp cannot read the
// address connect is given, so the filter refuses the socket itself:
//
//   - socket(AF_UNIX, ...) fails with EACCES (path and abstract sockets
//     alike);
//   - socketpair(AF_UNIX, ...) is allowed for SOCK_STREAM and
//     SOCK_SEQPACKET only: such a pair is connected and can never be
//     connected elsewhere, while a datagram one could sendto(2) a path;
//   - io_uring_setup, io_uring_enter and io_uring_register fail with
//     ENOSYS: io_uring creates and connects sockets without these system
//     calls;
//   - a system call of another ABI (i386 or x32 on x86-64, where one
//     socketcall(2) hides which call it makes) kills the process.
//
// Arguments are compared on their low 32 bits only: the kernel reads int
// arguments so, and a caller may set the high bits to anything.
//
// It is written with golang.org/x/net/bpf rather than a policy library
// (github.com/elastic/go-seccomp-bpf): that one sends the system calls of
// another architecture to the default action, which in a deny list is
// "allow", and compares int arguments on 64 bits.

// seccompArch is the audit architecture and x32 flag of this build.
type seccompArch struct {
	audit uint32
	x32   bool // x86-64: also refuse system call numbers of the x32 ABI
}

// archs are the architectures the filter is built for: those without
// socketcall(2), whose socket calls always show their family.
var archs = map[string]seccompArch{
	"amd64":   {audit: unix.AUDIT_ARCH_X86_64, x32: true},
	"arm64":   {audit: unix.AUDIT_ARCH_AARCH64},
	"riscv64": {audit: unix.AUDIT_ARCH_RISCV64},
	"loong64": {audit: unix.AUDIT_ARCH_LOONGARCH64},
}

// Offsets in struct seccomp_data: the system call number, the audit
// architecture, and the low 32 bits of each argument on the little-endian
// architectures above.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16
	offArg1 = 24

	x32SyscallBit = 0x40000000
	sockTypeMask  = 0xf // SOCK_TYPE_MASK: the type without SOCK_CLOEXEC and SOCK_NONBLOCK
)

// seccompFilter returns the filter for goarch.
func seccompFilter(goarch string) ([]bpf.Instruction, error) {
	a, ok := archs[goarch]
	if !ok {
		return nil, fmt.Errorf("no filter for %s (there is one for amd64, arm64, riscv64 and loong64)", goarch)
	}
	var p program
	p.load(offArch)
	p.jumpIf(bpf.JumpEqual, a.audit, "nr", "kill")
	p.label("nr")
	p.load(offNr)
	if a.x32 {
		p.jumpIf(bpf.JumpGreaterOrEqual, x32SyscallBit, "kill", "dispatch")
	}
	p.label("dispatch")
	p.jumpIf(bpf.JumpEqual, unix.SYS_IO_URING_SETUP, "enosys", "")
	p.jumpIf(bpf.JumpEqual, unix.SYS_IO_URING_ENTER, "enosys", "")
	p.jumpIf(bpf.JumpEqual, unix.SYS_IO_URING_REGISTER, "enosys", "")
	p.jumpIf(bpf.JumpEqual, unix.SYS_SOCKET, "socket", "")
	p.jumpIf(bpf.JumpEqual, unix.SYS_SOCKETPAIR, "socketpair", "allow")

	// socket: never AF_UNIX.
	p.label("socket")
	p.load(offArg0)
	p.jumpIf(bpf.JumpEqual, unix.AF_UNIX, "eacces", "allow")

	// socketpair: AF_UNIX only as a stream or sequenced-packet pair.
	p.label("socketpair")
	p.load(offArg0)
	p.jumpIf(bpf.JumpEqual, unix.AF_UNIX, "pairtype", "allow")
	p.label("pairtype")
	p.load(offArg1)
	p.add(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: sockTypeMask})
	p.jumpIf(bpf.JumpEqual, unix.SOCK_STREAM, "allow", "")
	p.jumpIf(bpf.JumpEqual, unix.SOCK_SEQPACKET, "allow", "eacces")

	p.label("allow")
	p.add(bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW})
	p.label("eacces")
	p.add(bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES)})
	p.label("enosys")
	p.add(bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)})
	p.label("kill")
	p.add(bpf.RetConstant{Val: unix.SECCOMP_RET_KILL_PROCESS})
	return p.resolve()
}

// program is a classic BPF program with forward jumps to labels.
type program struct {
	insns  []bpf.Instruction
	jumps  map[int][2]string // instruction -> labels if true, if false ("" = next)
	labels map[string]int
}

func (p *program) add(i bpf.Instruction) { p.insns = append(p.insns, i) }

func (p *program) load(off uint32) { p.add(bpf.LoadAbsolute{Off: off, Size: 4}) }

func (p *program) label(name string) {
	if p.labels == nil {
		p.labels = map[string]int{}
	}
	p.labels[name] = len(p.insns)
}

func (p *program) jumpIf(cond bpf.JumpTest, val uint32, ifTrue, ifFalse string) {
	if p.jumps == nil {
		p.jumps = map[int][2]string{}
	}
	p.jumps[len(p.insns)] = [2]string{ifTrue, ifFalse}
	p.add(bpf.JumpIf{Cond: cond, Val: val})
}

// resolve fills in the jumps' skips.
func (p *program) resolve() ([]bpf.Instruction, error) {
	skip := func(from int, label string) (uint8, error) {
		if label == "" {
			return 0, nil
		}
		to, ok := p.labels[label]
		if !ok || to <= from || to-from-1 > 255 {
			return 0, fmt.Errorf("bad jump from %d to %q", from, label)
		}
		return uint8(to - from - 1), nil
	}
	for at, l := range p.jumps {
		j := p.insns[at].(bpf.JumpIf)
		var err error
		if j.SkipTrue, err = skip(at, l[0]); err != nil {
			return nil, err
		}
		if j.SkipFalse, err = skip(at, l[1]); err != nil {
			return nil, err
		}
		p.insns[at] = j
	}
	return p.insns, nil
}

// errNoSeccomp: the filter could not be built or installed.
var errNoSeccomp = errors.New("seccomp")

// seccompProgram assembles the filter of this build for the kernel.
func seccompProgram() ([]unix.SockFilter, error) {
	insns, err := seccompFilter(runtime.GOARCH)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoSeccomp, err)
	}
	raw, err := bpf.Assemble(insns)
	if err != nil {
		return nil, fmt.Errorf("%w: assemble: %w", errNoSeccomp, err)
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

// installSeccomp installs prog on the calling thread, which then execs:
// the filter passes to the command and every process it starts. It sets
// no_new_privs first (Landlock already did).
func installSeccomp(prog []unix.SockFilter) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("%w: no_new_privs: %w", errNoSeccomp, err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	_, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return fmt.Errorf("%w: %w", errNoSeccomp, errno)
	}
	return nil
}
