package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// MinDiskBytes is the smallest workspace filesystem MountDisk makes.
const MinDiskBytes = 8 << 20

var (
	// ErrDiskUnavailable is returned (wrapped, with why) by [MountDisk]
	// when it cannot mount a filesystem here: the worker is not root, or
	// loop devices or mkfs.ext4 are missing.
	ErrDiskUnavailable = errors.New("sandbox: cannot mount a size-limited workspace filesystem")
	// ErrDiskNotEmpty is returned (wrapped) by [MountDisk] when the
	// workspace root holds files and no filesystem image: mounting one
	// would hide them.
	ErrDiskNotEmpty = errors.New("sandbox: the workspace root holds files")
)

// DiskConfig says where the workspaces' filesystem lives.
type DiskConfig struct {
	// Root is the directory holding the workspaces (created if missing).
	Root string
	// Image is the filesystem image mounted on Root; default Root+".img".
	Image string
	// MaxBytes is the size of the filesystem made (at least
	// MinDiskBytes).
	MaxBytes int64
}

// Disk is the filesystem of bounded size the workspaces live on.
type Disk struct {
	// Root is the directory holding the workspaces.
	Root string
	// Size is the filesystem's size in bytes: no workspace write goes
	// beyond it (ENOSPC).
	Size int64
	// Image is the image file MountDisk mounted on Root; empty when Root
	// was a filesystem of its own already.
	Image string
}

// String describes the disk for the worker's log.
func (d *Disk) String() string {
	if d.Image == "" {
		return fmt.Sprintf("%s: a filesystem of its own, %s", d.Root, approx(d.Size))
	}
	return fmt.Sprintf("%s: ext4 image %s, %s", d.Root, d.Image, approx(d.Size))
}

// approx is a size to one decimal.
func approx(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}

// MountDisk makes Root a filesystem of bounded size, so that commands
// cannot fill the filesystem it is on (the JetStream store's, by
// default).
//
// A Root that is a mount point already (a tmpfs or volume the operator
// mounted, or this image left mounted by a worker that died) is taken as
// it is. Otherwise Root gets a loop-mounted ext4 image of MaxBytes (a
// sparse file: it takes the space its files take, up to MaxBytes), made
// with mkfs.ext4 the first time; the workspaces persist in it across
// restarts. That needs root, loop devices and mkfs.ext4: without them the
// error wraps [ErrDiskUnavailable]; a Root holding files but no image
// yet fails with [ErrDiskNotEmpty].
func MountDisk(cfg DiskConfig) (*Disk, error) {
	if !filepath.IsAbs(cfg.Root) {
		return nil, fmt.Errorf("sandbox: workspace root %q is not absolute", cfg.Root)
	}
	if cfg.Image == "" {
		cfg.Image = filepath.Clean(cfg.Root) + ".img"
	}
	if err := os.MkdirAll(cfg.Root, 0o750); err != nil {
		return nil, fmt.Errorf("sandbox: workspace root: %w", err)
	}
	if own, err := mountPoint(cfg.Root); err != nil {
		return nil, fmt.Errorf("sandbox: workspace root: %w", err)
	} else if own {
		n, err := fsSize(cfg.Root)
		if err != nil {
			return nil, err
		}
		return &Disk{Root: cfg.Root, Size: n}, nil
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: mounting one needs root", ErrDiskUnavailable)
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return nil, fmt.Errorf("%w: no loop devices: %w", ErrDiskUnavailable, err)
	}
	fi, err := os.Stat(cfg.Image)
	switch {
	case err == nil:
		if fi.Size() != cfg.MaxBytes {
			return nil, fmt.Errorf("sandbox: workspace image %s holds %s, not the %s asked: grow it (truncate -s, then resize2fs once mounted) or remove it with its workspaces", cfg.Image, size(fi.Size()), size(cfg.MaxBytes))
		}
	case errors.Is(err, os.ErrNotExist):
		if cfg.MaxBytes < MinDiskBytes {
			return nil, fmt.Errorf("sandbox: a workspace filesystem of %s: it needs %s at least", size(cfg.MaxBytes), size(MinDiskBytes))
		}
		if empty, err := emptyDir(cfg.Root); err != nil {
			return nil, fmt.Errorf("sandbox: workspace root: %w", err)
		} else if !empty {
			return nil, fmt.Errorf("%w (%s): a filesystem mounted on it would hide them", ErrDiskNotEmpty, cfg.Root)
		}
		if err := makeImage(cfg.Image, cfg.MaxBytes); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("sandbox: workspace image: %w", err)
	}
	if err := mountImage(cfg.Image, cfg.Root); err != nil {
		return nil, err
	}
	d := &Disk{Root: cfg.Root, Image: cfg.Image}
	if err := os.Chmod(cfg.Root, 0o750); err != nil {
		d.Close() //nolint:errcheck // the chmod error says more
		return nil, fmt.Errorf("sandbox: workspace root: %w", err)
	}
	if d.Size, err = fsSize(cfg.Root); err != nil {
		d.Close() //nolint:errcheck // the statfs error says more
		return nil, err
	}
	return d, nil
}

// Close unmounts the image MountDisk mounted (lazily: commands still
// running keep it until they end); it leaves a filesystem it found alone.
func (d *Disk) Close() error {
	if d == nil || d.Image == "" {
		return nil
	}
	if err := unix.Unmount(d.Root, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("sandbox: unmount %s: %w", d.Root, err)
	}
	return nil
}

// SameFilesystem reports whether a and b (or, for a path that does not
// exist yet, its nearest existing parent) are on the same filesystem.
func SameFilesystem(a, b string) (bool, error) {
	da, err := device(a)
	if err != nil {
		return false, err
	}
	db, err := device(b)
	if err != nil {
		return false, err
	}
	return da == db, nil
}

func device(p string) (uint64, error) {
	p = filepath.Clean(p)
	for {
		var st unix.Stat_t
		err := unix.Stat(p, &st)
		if err == nil {
			return st.Dev, nil
		}
		if !errors.Is(err, unix.ENOENT) || filepath.Dir(p) == p {
			return 0, fmt.Errorf("sandbox: stat %s: %w", p, err)
		}
		p = filepath.Dir(p)
	}
}

// mountPoint reports whether dir is the root of a mount.
func mountPoint(dir string) (bool, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, unix.AT_SYMLINK_NOFOLLOW, 0, &st); err != nil {
		return false, err
	}
	if st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
	}
	// Before Linux 5.8: another device than the parent's.
	return SameFilesystem(dir, filepath.Dir(dir))
}

func fsSize(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("sandbox: statfs %s: %w", dir, err)
	}
	return int64(st.Blocks) * st.Bsize, nil
}

func emptyDir(dir string) (bool, error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return false, err
}

// makeImage makes a sparse file of n bytes holding an empty ext4
// filesystem owned by the worker.
func makeImage(image string, n int64) (err error) {
	mkfs, err := lookMkfs()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(image, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("sandbox: workspace image: %w", err)
	}
	defer func() {
		if err != nil {
			os.Remove(image)
		}
	}()
	err = f.Truncate(n)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sandbox: workspace image: %w", err)
	}
	owner := strconv.Itoa(os.Geteuid()) + ":" + strconv.Itoa(os.Getegid())
	// No blocks reserved for root: the worker writes as root. The file
	// reads as zeros: nothing needs zeroing, so it stays sparse.
	out, err := exec.Command(mkfs, "-q", "-F", "-m", "0", "-L", "lanefleet-ws",
		"-E", "root_owner="+owner+",lazy_itable_init=1,lazy_journal_init=1", image).CombinedOutput()
	if err != nil {
		return fmt.Errorf("sandbox: %s %s: %w: %s", mkfs, image, err, out)
	}
	return nil
}

func lookMkfs() (string, error) {
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: mkfs.ext4 (e2fsprogs) is not installed", ErrDiskUnavailable)
}

// mountImage attaches image to a free loop device and mounts it on dir.
// The device detaches itself when the filesystem is unmounted.
func mountImage(image, dir string) error {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDiskUnavailable, err)
	}
	defer ctl.Close()
	img, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("sandbox: workspace image: %w", err)
	}
	defer img.Close()
	// Another process may take the free device first: try the next.
	for range 16 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return fmt.Errorf("%w: loop device: %w", ErrDiskUnavailable, err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		loop, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrDiskUnavailable, err)
		}
		lc := unix.LoopConfig{Fd: uint32(img.Fd()), Info: unix.LoopInfo64{Flags: unix.LO_FLAGS_AUTOCLEAR}}
		copy(lc.Info.File_name[:len(lc.Info.File_name)-1], image)
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &lc)
		if errors.Is(err, unix.EBUSY) {
			loop.Close()
			continue
		}
		if err != nil {
			loop.Close()
			return fmt.Errorf("%w: configure %s: %w", ErrDiskUnavailable, dev, err)
		}
		// noinit_itable: the image was made sparse; zeroing its inode
		// tables would only fill it.
		err = unix.Mount(dev, dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV, "noinit_itable")
		loop.Close() // the mount holds the device now; without it, it detaches
		if err != nil {
			return fmt.Errorf("sandbox: mount %s (%s) on %s: %w", image, dev, dir, err)
		}
		return nil
	}
	return fmt.Errorf("%w: no free loop device", ErrDiskUnavailable)
}
