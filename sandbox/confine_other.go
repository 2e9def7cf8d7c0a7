//go:build !linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"runtime"
)

// Main returns at once: off Linux, there is no helper.
func Main() {}

func probe(context.Context, *Sandbox) (Platform, error) {
	return Platform{}, fmt.Errorf("%w: confinement needs Linux (Landlock, namespaces); on %s exec can only run unconfined", ErrUnavailable, runtime.GOOS)
}

func (c *Cmd) startConfined(context.Context) error {
	return errors.New("sandbox: confinement needs Linux")
}

// cgroups and cgroup exist on Linux only.
type (
	cgroups struct{}
	cgroup  struct{}
)

func (*cgroup) kill()         {}
func (*cgroup) remove() error { return nil }
