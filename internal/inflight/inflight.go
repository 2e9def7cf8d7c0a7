// Package inflight bounds and tracks the requests a NATS micro service
// answers on goroutines of their own, so that its Stop cancels them and
// waits for them: the one home of the machinery the admin, lane, hook and
// remote tool services share.
//
// A micro handler runs on its endpoint's subscription goroutine and must
// return at once for the endpoint's next request, so each request runs on
// a goroutine of its own (Group.Go). The slot is taken before that
// goroutine starts: while every slot is busy the subscription goroutine
// waits, and the requests behind it wait in the subscription, not in
// goroutines of their own (bounded goroutines, backpressure).
package inflight

import (
	"context"
	"errors"
	"runtime/debug"
	"sync"
)

// ErrStopping is Go's error once the group is stopping: the request was
// not run, and the service answers that it is unavailable.
var ErrStopping = errors.New("inflight: stopping")

// Group is the requests in flight of one service. Its zero value is not
// usable; New makes one.
type Group struct {
	ctx    context.Context // parent of every request's context
	cancel context.CancelCauseFunc
	slots  chan struct{}
	closed chan struct{} // closed when the group stops taking requests

	mu       sync.Mutex
	stopping bool
	running  sync.WaitGroup
}

// New returns a group that runs at most n requests at once (1 when n is
// not positive).
func New(n int) *Group {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Group{ctx: ctx, cancel: cancel, slots: make(chan struct{}, max(1, n)), closed: make(chan struct{})}
}

// Go runs f on a goroutine of its own once a slot is free, waiting for one
// while every slot is busy. f's context ends when the group's Stop or
// Shutdown cancels the requests in flight; its cause is theirs.
//
// When recovered is not nil, a panic in f is recovered and recovered gets
// its value and stack (to log it and answer the request). Go returns ErrStopping,
// without running f, once the group stops taking requests, also when it
// was waiting for a slot.
func (g *Group) Go(f func(ctx context.Context), recovered func(v any, stack []byte)) error {
	select {
	case g.slots <- struct{}{}:
	case <-g.closed:
		return ErrStopping
	}
	g.mu.Lock()
	if g.stopping {
		g.mu.Unlock()
		<-g.slots
		return ErrStopping
	}
	g.running.Add(1)
	g.mu.Unlock()
	go func() {
		defer func() {
			<-g.slots
			g.running.Done()
		}()
		if recovered != nil {
			defer func() {
				if v := recover(); v != nil {
					recovered(v, debug.Stack())
				}
			}()
		}
		f(g.ctx)
	}()
	return nil
}

// Stop is Shutdown without grace: the requests in flight are cancelled
// (with cause) as soon as stop returned.
func (g *Group) Stop(cause error, stop func() error) error {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	return g.Shutdown(done, cause, stop)
}

// Shutdown stops taking requests (Go returns ErrStopping from now on),
// calls stop (the service's own: micro's Stop, and a flush so that the
// server routes no more requests here), and waits for the requests in
// flight to return; when ctx ends first, it cancels them with cause (nil
// is context.Canceled) and waits for them to return. It returns stop's
// error. A request that ignores its context delays Shutdown until it
// returns.
func (g *Group) Shutdown(ctx context.Context, cause error, stop func() error) error {
	g.mu.Lock()
	if !g.stopping {
		g.stopping = true
		close(g.closed)
	}
	g.mu.Unlock()
	var err error
	if stop != nil {
		err = stop()
	}
	done := make(chan struct{})
	go func() { g.running.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		g.cancel(cause)
		<-done
	}
	g.cancel(cause)
	return err
}
