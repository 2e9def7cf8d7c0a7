//go:build !linux

package sandbox

import (
	"errors"
	"fmt"
	"runtime"
)

// MinDiskBytes is the smallest workspace filesystem MountDisk makes.
const MinDiskBytes = 8 << 20

var (
	// ErrDiskUnavailable: see the Linux documentation; off Linux
	// MountDisk always fails with it.
	ErrDiskUnavailable = errors.New("sandbox: cannot mount a size-limited workspace filesystem")
	// ErrDiskNotEmpty: see the Linux documentation.
	ErrDiskNotEmpty = errors.New("sandbox: the workspace root holds files")
)

// DiskConfig says where the workspaces' filesystem lives.
type DiskConfig struct {
	Root     string
	Image    string
	MaxBytes int64
}

// Disk is the filesystem of bounded size the workspaces live on.
type Disk struct {
	Root  string
	Size  int64
	Image string
}

func (d *Disk) String() string { return d.Root }

// MountDisk fails off Linux.
func MountDisk(DiskConfig) (*Disk, error) {
	return nil, fmt.Errorf("%w: on %s", ErrDiskUnavailable, runtime.GOOS)
}

// Close does nothing off Linux.
func (d *Disk) Close() error { return nil }

// SameFilesystem fails off Linux: it cannot tell.
func SameFilesystem(a, b string) (bool, error) {
	return false, fmt.Errorf("sandbox: comparing filesystems needs Linux (%s)", runtime.GOOS)
}
