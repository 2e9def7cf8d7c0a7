package inflight_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/internal/inflight"
)

// blockers starts n requests on g that each wait for release (or their
// context) and returns once all run.
func blockers(t *testing.T, g *inflight.Group, n int, release <-chan struct{}) {
	t.Helper()
	started := make(chan struct{}, n)
	for range n {
		err := g.Go(func(ctx context.Context) {
			started <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
		}, nil)
		if err != nil {
			t.Fatalf("Go: %v", err)
		}
	}
	for range n {
		<-started
	}
}

// TestGoBoundsRequests: with every slot busy, Go waits in its caller (no
// goroutine is started), and runs the request once a slot is free; never
// more than n run at once.
func TestGoBoundsRequests(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run("", func(t *testing.T) {
			g := inflight.New(n)
			var running, peak atomic.Int32
			release := make(chan struct{})
			started := make(chan struct{}, n+2)
			f := func(context.Context) {
				r := running.Add(1)
				for p := peak.Load(); r > p && !peak.CompareAndSwap(p, r); p = peak.Load() {
				}
				started <- struct{}{}
				<-release
				running.Add(-1)
			}
			for range n {
				if err := g.Go(f, nil); err != nil {
					t.Fatal(err)
				}
			}
			for range n {
				<-started
			}
			returned := make(chan error, 2)
			go func() {
				returned <- g.Go(f, nil)
				returned <- g.Go(f, nil)
			}()
			select {
			case err := <-returned:
				t.Fatalf("Go returned (%v) while all %d slots were busy", err, n)
			case <-time.After(50 * time.Millisecond): // a wrong pass only weakens the test
			}
			release <- struct{}{}
			if err := <-returned; err != nil {
				t.Fatal(err)
			}
			<-started
			close(release)
			if err := <-returned; err != nil {
				t.Fatal(err)
			}
			if err := g.Stop(nil, nil); err != nil {
				t.Fatal(err)
			}
			if p := peak.Load(); p != int32(n) {
				t.Fatalf("peak %d requests at once, want %d", p, n)
			}
		})
	}
}

// TestStopRefusesAndCancels: Stop refuses new requests and the ones
// waiting for a slot, cancels those in flight with its cause and waits
// for them; stop runs once refusing began, and its error is Stop's.
func TestStopRefusesAndCancels(t *testing.T) {
	errStop := errors.New("stop failed")
	errCause := errors.New("the service stops")
	for _, tc := range []struct {
		name      string
		cause     error
		wantCause error
		stopErr   error
	}{
		{"nil cause", nil, context.Canceled, nil},
		{"cause", errCause, errCause, nil},
		{"stop error", errCause, errCause, errStop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := inflight.New(1)
			causes := make(chan error, 1)
			started := make(chan struct{})
			if err := g.Go(func(ctx context.Context) {
				close(started)
				<-ctx.Done()
				causes <- context.Cause(ctx)
			}, nil); err != nil {
				t.Fatal(err)
			}
			<-started
			waiting := make(chan error, 1)
			go func() { waiting <- g.Go(func(context.Context) { t.Error("a request ran after Stop") }, nil) }()
			var inStop error
			err := g.Stop(tc.cause, func() error {
				// The request that waited for the slot was refused.
				select {
				case err := <-waiting:
					if !errors.Is(err, inflight.ErrStopping) {
						t.Errorf("waiting Go: %v, want ErrStopping", err)
					}
				case <-time.After(time.Minute):
					t.Error("a Go waiting for a slot was not refused when the group stopped")
				}
				inStop = g.Go(func(context.Context) { t.Error("a request ran while stopping") }, nil)
				return tc.stopErr
			})
			if !errors.Is(err, tc.stopErr) || (tc.stopErr == nil && err != nil) {
				t.Fatalf("Stop: %v, want %v", err, tc.stopErr)
			}
			if !errors.Is(inStop, inflight.ErrStopping) {
				t.Fatalf("Go in stop: %v, want ErrStopping", inStop)
			}
			select {
			case c := <-causes:
				if !errors.Is(c, tc.wantCause) {
					t.Fatalf("cause %v, want %v", c, tc.wantCause)
				}
			default:
				t.Fatal("Stop returned before the request in flight")
			}
			if err := g.Go(func(context.Context) { t.Error("a request ran after Stop") }, nil); !errors.Is(err, inflight.ErrStopping) {
				t.Fatalf("Go after Stop: %v, want ErrStopping", err)
			}
		})
	}
}

// TestShutdownGrace: Shutdown lets the requests in flight finish while its
// context lasts, and cancels them (with its cause) once it ends.
func TestShutdownGrace(t *testing.T) {
	errCause := errors.New("grace over")
	for _, tc := range []struct {
		name   string
		expire bool // the grace ends before the request finishes
	}{
		{"request finishes", false},
		{"grace ends", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := inflight.New(2)
			finish := make(chan struct{})
			causes := make(chan error, 1)
			if err := g.Go(func(ctx context.Context) {
				select {
				case <-finish:
				case <-ctx.Done():
				}
				causes <- context.Cause(ctx)
			}, nil); err != nil {
				t.Fatal(err)
			}
			grace, cancel := context.WithCancel(context.Background())
			defer cancel()
			err := g.Shutdown(grace, errCause, func() error {
				if tc.expire {
					cancel()
				} else {
					close(finish)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			want := error(nil)
			if tc.expire {
				want = errCause
			}
			if c := <-causes; !errors.Is(c, want) || (want == nil && c != nil) {
				t.Fatalf("the request's context cause %v, want %v", c, want)
			}
		})
	}
}

// TestGoRecovers: a panicking request reaches recovered with its stack,
// frees its slot, and does not hold up Stop.
func TestGoRecovers(t *testing.T) {
	g := inflight.New(1)
	got := make(chan string, 1)
	if err := g.Go(func(context.Context) { panic("boom") }, func(v any, stack []byte) {
		if !strings.Contains(string(stack), "inflight_test") {
			t.Errorf("stack does not show the panic:\n%s", stack)
		}
		got <- v.(string)
	}); err != nil {
		t.Fatal(err)
	}
	if v := <-got; v != "boom" {
		t.Fatalf("recovered %q", v)
	}
	release := make(chan struct{})
	blockers(t, g, 1, release) // the slot is free again
	close(release)
	if err := g.Stop(nil, nil); err != nil {
		t.Fatal(err)
	}
}
