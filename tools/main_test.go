package tools

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/lanefleet/lanefleet/sandbox"
)

func TestMain(m *testing.M) {
	sandbox.Main() // exec's confined commands start as this binary
	os.Exit(m.Run())
}

var (
	boxOnce                sync.Once
	confinedBox, looseBox  *sandbox.Sandbox
	confinedErr, unconfErr error
)

// boxes returns the confined sandbox (nil where the platform has none) and
// an unconfined one, shared by the tests.
func boxes(t testing.TB) (confined, unconfined *sandbox.Sandbox) {
	t.Helper()
	boxOnce.Do(func() {
		confinedBox, confinedErr = sandbox.New(context.Background(), sandbox.Config{})
		if errors.Is(confinedErr, sandbox.ErrUnavailable) {
			confinedBox, confinedErr = nil, nil
		}
		looseBox, unconfErr = sandbox.New(context.Background(), sandbox.Config{Unconfined: true})
	})
	if err := errors.Join(confinedErr, unconfErr); err != nil {
		t.Fatal(err)
	}
	return confinedBox, looseBox
}

// defaultBox is the sandbox exec runs with in the fixture: confined where
// the platform allows.
func defaultBox(t testing.TB) *sandbox.Sandbox {
	t.Helper()
	c, u := boxes(t)
	if c != nil {
		return c
	}
	return u
}
