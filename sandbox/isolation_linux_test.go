package sandbox

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestUnixSocketsRefused: a root-only UNIX socket the test listens on, in
// the command's own workspace (Landlock grants it, but does not mediate
// connect(2)), cannot be reached from inside: the seccomp filter refuses
// the AF_UNIX socket. Before it, the command connected and was seen as uid
// 0, as it would be by docker.sock, systemd or D-Bus.
func TestUnixSocketsRefused(t *testing.T) {
	t.Parallel()
	bin := toolBinary(t)
	eachMode(t, Config{ReadOnly: []string{bin}}, func(t *testing.T, box *Sandbox) {
		s := newSetup(t)
		sock := filepath.Join(s.ws, "root.sock")
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if err := os.Chmod(sock, 0o600); err != nil {
			t.Fatal(err)
		}
		out, st := runTool(t, box, bin, s.ws, "connect", sock)
		// A connection the command made waits in the backlog: take it
		// without blocking.
		rc, err := ln.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var (
			nfd  int
			aerr error
		)
		rc.Control(func(fd uintptr) { nfd, _, aerr = unix.Accept4(int(fd), unix.SOCK_CLOEXEC) }) //nolint:errcheck
		if aerr == nil {
			cred, err := unix.GetsockoptUcred(nfd, unix.SOL_SOCKET, unix.SO_PEERCRED)
			unix.Close(nfd)
			if err != nil {
				t.Fatal(err)
			}
			t.Fatalf("the command connected to a root-only socket and was seen as uid %d: %q", cred.Uid, out)
		}
		if st.ExitCode() != 3 || !strings.Contains(out, "socket: permission denied") {
			t.Fatalf("exit %d, %q", st.ExitCode(), out)
		}
		if !box.Platform().Seccomp {
			t.Fatalf("refused, but the platform says no seccomp: %s", box.Platform())
		}
	})
}

// TestPeerSeesUnprivilegedUID: what a command writes to a UNIX socket (its
// stdout here) carries its credentials, as a connection's SO_PEERCRED
// does: with a worker running as root, they are HostID's, not root's. Its
// workspace stays the worker's: a file the worker wrote can be appended
// to, and a file the command makes belongs to the worker on disk.
func TestPeerSeesUnprivilegedUID(t *testing.T) {
	t.Parallel()
	box := confined(t)
	p := box.Platform()
	if !p.Namespaces {
		t.Skip("without user namespaces commands run as the worker: " + p.String())
	}
	s := newSetup(t)
	if err := os.WriteFile(filepath.Join(s.ws, "worker.txt"), []byte("w\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	if err := unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		t.Fatal(err)
	}
	stdout := os.NewFile(uintptr(fds[1]), "stdout")
	cmd := box.Command(s.ws, env, "/bin/sh", "sh", "-c", "echo more >> worker.txt && echo made > made.txt && echo done")
	cmd.Stdout = stdout
	if err := cmd.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	stdout.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	buf, oob := make([]byte, 64), make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	n, oobn, _, _, err := unix.Recvmsg(fds[0], buf, oob, 0)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("no credentials: %v %v", msgs, err)
	}
	cred, err := unix.ParseUnixCredentials(&msgs[0])
	if err != nil {
		t.Fatal(err)
	}
	want := uint32(os.Geteuid())
	if os.Geteuid() == 0 {
		want = DefaultHostID
	}
	if cred.Uid != want || cred.Gid != want || string(buf[:n]) != "done\n" {
		t.Fatalf("the peer saw uid %d gid %d (want %d) write %q; platform: %s", cred.Uid, cred.Gid, want, buf[:n], p)
	}
	if b, _ := os.ReadFile(filepath.Join(s.ws, "worker.txt")); string(b) != "w\nmore\n" {
		t.Fatalf("worker.txt: %q", b)
	}
	fi, err := os.Stat(filepath.Join(s.ws, "made.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != uint32(os.Geteuid()) || st.Gid != uint32(os.Getegid()) {
		t.Fatalf("made.txt belongs to %d:%d on disk", st.Uid, st.Gid)
	}
}

// TestRootOnlyWithHostID: a worker running as root without user
// namespaces would run commands as root: New refuses unless AllowRoot.
func TestRootOnlyWithHostID(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the worker is not root here")
	}
	_, err := New(t.Context(), Config{NoNamespaces: true})
	if errors.Is(err, ErrUnavailable) {
		t.Skip(err)
	}
	if !errors.Is(err, ErrRoot) || !strings.Contains(err.Error(), "AllowRoot") {
		t.Fatalf("without namespaces, as root: %v", err)
	}
	box := newBox(t, Config{NoNamespaces: true, AllowRoot: true})
	if p := box.Platform(); p.UID != 0 || !strings.Contains(p.String(), "runs as the host's root") {
		t.Fatal(p.String())
	}
}

// TestPrivateRoot: with namespaces, the command's / holds only what it is
// granted: /run (docker.sock, systemd, D-Bus), /var, /home and the rest of
// the machine are not there, while the system directories, their links
// and /dev/stderr work.
func TestPrivateRoot(t *testing.T) {
	t.Parallel()
	box := confined(t)
	if !box.Platform().Namespaces {
		t.Skip("no mount namespace here: " + box.Platform().String())
	}
	s := newSetup(t)
	out, st := sh(t, box, s.ws, `for d in /run /var /home /root /srv /opt /mnt /media /boot /sys `+filepath.Dir(s.outside)+`/outside; do
		test -e "$d" && echo "$d is there"; done
	echo to stderr > /dev/stderr; test -x /bin/sh && test -r /usr/bin/env && echo system`)
	if out != "to stderr\nsystem\n" || st.ExitCode() != 0 {
		t.Fatalf("exit %d, %q", st.ExitCode(), out)
	}
}

// holdScript holds 32 MiB of memory in awk until four processes in the
// directory do (each says so with a held.* file), then exits 0. Its first
// argument marks its processes.
const holdScript = `exec awk -v m="$1" 'BEGIN { s = "xxxxxxxxxxxxxxxx"; while (length(s) < 33554432) s = s s
	exit system(": " m "; touch held.$$; while [ $(ls held.* | wc -l) -lt 4 ]; do sleep 0.02; done") }'
`

// TestWholeCommandMemory: a command whose processes each stay within the
// memory limit but together go beyond it is stopped (the kernel kills a
// process of its cgroup), and every process it left is killed when it
// ends, also without a PID namespace. With rlimits alone (the address
// space of each process) all four held their memory at once.
func TestWholeCommandMemory(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/bin/bash"); err != nil {
		t.Skip("needs bash for wait -n")
	}
	eachMode(t, Config{Limits: Limits{Memory: 96 << 20}}, func(t *testing.T, box *Sandbox) {
		if box.Platform().Cgroup == "" {
			t.Skip("no cgroup here: " + box.Platform().String())
		}
		s := newSetup(t)
		if err := os.WriteFile(filepath.Join(s.ws, "hold.sh"), []byte(holdScript), 0o644); err != nil {
			t.Fatal(err)
		}
		// Four holders of 32 MiB: 128 MiB together. The first to end
		// says whether they all held at once.
		m := sleepMarker()
		out, st := sh(t, box, s.ws, `exec /bin/bash -c 'for i in 1 2 3 4; do sh hold.sh `+m+` & done
			wait -n && { echo ALL HELD; exit 0; }; echo "a holder ended: $?"; exit 1'`)
		if strings.Contains(out, "ALL HELD") || st.Success() {
			t.Fatalf("%s: %q", st, out)
		}
		t.Logf("%s: %q", st, out)
		waitGone(t, m)
	})
}

// TestWholeCommandCPU: many busy threads of one command get its CPU share
// together, not a CPU each.
func TestWholeCommandCPU(t *testing.T) {
	t.Parallel()
	bin := toolBinary(t)
	box := newBox(t, Config{ReadOnly: []string{bin}, Limits: Limits{CPUs: 0.1}})
	if box.Platform().Cgroup == "" {
		t.Skip("no cgroup here: " + box.Platform().String())
	}
	s := newSetup(t)
	// 3 s, so the first period's slack weighs little (1 s measured 0.31
	// once on a loaded machine).
	out, st := runTool(t, box, bin, s.ws, "spin", "8", "3s")
	m := regexp.MustCompile(`ratio ([0-9.]+)`).FindStringSubmatch(out)
	if !st.Success() || m == nil {
		t.Fatalf("%s: %q", st, out)
	}
	// A tenth of a CPU, with slack for the first period; unbounded,
	// eight threads take most of every CPU there is, however busy the
	// machine (0.8 of 2 CPUs at a load of 18).
	if ratio, _ := strconv.ParseFloat(m[1], 64); ratio > 0.3 {
		t.Fatalf("CPU/wall %v, share 0.1: %q", ratio, out)
	}
	t.Log(out)
}

// TestNoCgroup: without a cgroup the platform says so, and memory is the
// address space of each process.
func TestNoCgroup(t *testing.T) {
	t.Parallel()
	box := newBox(t, Config{NoCgroup: true, Limits: Limits{Memory: 128 << 20}})
	p := box.Platform()
	if p.Cgroup != "" || !strings.Contains(p.String(), "NO CGROUP (Config.NoCgroup)") || !strings.Contains(p.String(), "memory 128MiB (address space)") {
		t.Fatal(p.String())
	}
	s := newSetup(t)
	// awk doubles a string until it cannot.
	out, st := sh(t, box, s.ws, `awk 'BEGIN { s = "x"; for (i = 0; i < 40; i++) s = s s; print length(s) }'`)
	if st.Success() || strings.Contains(out, "1099511627776") {
		t.Fatalf("%s: %q", st, out)
	}
}

// TestMountDisk: the workspaces get a filesystem of their own, of the
// size asked: a command that writes beyond it fails with ENOSPC, and the
// filesystem the image lies on (the store's) is another. It persists
// across mounts, and a root holding files is not covered.
func TestMountDisk(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	root := filepath.Join(base, "workspaces")
	d, err := MountDisk(DiskConfig{Root: root, MaxBytes: 16 << 20})
	if errors.Is(err, ErrDiskUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Image != root+".img" || d.Size > 16<<20 || d.Size < 8<<20 {
		t.Fatalf("%+v", d)
	}
	if same, err := SameFilesystem(root, base); err != nil || same {
		t.Fatalf("same filesystem as the store: %v %v", same, err)
	}
	ws := filepath.Join(root, "alice")
	if err := os.Mkdir(ws, 0o750); err != nil {
		t.Fatal(err)
	}
	box := confined(t)
	out, st := sh(t, box, ws, "head -c 32M /dev/zero > big")
	fi, err := os.Stat(filepath.Join(ws, "big"))
	if st.Success() || !strings.Contains(out, "No space left on device") || err != nil || fi.Size() > 16<<20 {
		t.Fatalf("%s: %q; %v %v", st, out, fi, err)
	}
	var img syscall.Stat_t
	if err := syscall.Stat(d.Image, &img); err != nil || img.Blocks*512 > 16<<20 {
		t.Fatalf("image takes %d bytes: %v", img.Blocks*512, err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ws); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("still mounted: %v", err)
	}
	// Again: the image is there, its files too.
	d, err = MountDisk(DiskConfig{Root: root, MaxBytes: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := os.Stat(filepath.Join(ws, "big")); err != nil {
		t.Fatal(err)
	}
	// Another size than the image's is refused, not silently kept.
	if _, err := MountDisk(DiskConfig{Root: filepath.Join(base, "other"), Image: d.Image, MaxBytes: 32 << 20}); err == nil || !strings.Contains(err.Error(), "not the 32MiB asked") {
		t.Fatalf("another size: %v", err)
	}
	// A root with files and no image.
	full := filepath.Join(base, "full")
	if err := os.MkdirAll(filepath.Join(full, "bob"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := MountDisk(DiskConfig{Root: full, MaxBytes: 16 << 20}); !errors.Is(err, ErrDiskNotEmpty) {
		t.Fatalf("a root with files: %v", err)
	}
	// A root that is a filesystem of its own is taken as it is.
	own, err := MountDisk(DiskConfig{Root: root, MaxBytes: 1 << 30})
	if err != nil || own.Image != "" || own.Size != d.Size {
		t.Fatalf("%+v %v", own, err)
	}
}
