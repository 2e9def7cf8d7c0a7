package remote_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/remote"
)

// waitLimit bounds a wait on an event: generous, as CI is slow.
const waitLimit = time.Minute

// stallProofBeat is the heartbeat of the tests whose calls must live:
// a call fails after HeartbeatMisses silent intervals, and under the race
// detector on a loaded machine (a load of 26 on 2 cores) a process stalled
// past 3 s, a second's beat's silence; 2 s gives 6 s.
const stallProofBeat = 2 * time.Second

// TestLostServiceFailsCall: the process running a call is cut off (its
// connection closes, as when it is killed) while the call runs; the
// caller, whose timeout is ten minutes, fails the call once the
// heartbeats stop, with an error that says the call may have run in part
// and names its idempotency key. Before heartbeats the call waited for
// its timeout.
func TestLostServiceFailsCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dying := natstest.Connect(t, b.url)
	started := make(chan struct{}, 1)
	svc, err := remote.Serve(dying, remote.ServiceConfig{Logger: b.log}, newTool("slow", func(ctx context.Context, _ tools.Call) (tools.Result, error) {
		started <- struct{}{}
		<-ctx.Done()
		return tools.Result{}, context.Cause(ctx)
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() }) // ends the tool; the connection is gone
	tool := b.lookup(t, "slow", remote.DiscoverConfig{CallTimeout: 10 * time.Minute, Heartbeat: 100 * time.Millisecond})
	errc := make(chan error, 1)
	go func() {
		_, err := tool.Call(t.Context(), tools.Call{ID: "c1", Key: "run-1:c1"})
		errc <- err
	}()
	<-started
	dying.Close()
	select {
	case err := <-errc:
		e := remoteErr(t, err, remote.ErrLost)
		if want := "tool slow's server stopped answering (no heartbeat for 300ms); the call may have taken effect in part (idempotency key run-1:c1)"; e.Message != want {
			t.Errorf("error = %q\nwant %q", e.Message, want)
		}
	case <-time.After(waitLimit):
		t.Fatal("the call still waits a minute after its server was cut off")
	}
}

// TestHeartbeatsKeepCallAlive: a call that runs longer than the silence
// that fails a call is kept alive by the service's heartbeats, and ends
// with its result. The test lets the tool return once it has seen the
// caller's reply subject get more heartbeats than the silence spans.
func TestHeartbeatsKeepCallAlive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	b.serve(t, b.server, remote.ServiceConfig{}, newTool("long", func(ctx context.Context, _ tools.Call) (tools.Result, error) {
		select {
		case <-release:
			return tools.TextResult("done"), nil
		case <-ctx.Done():
			return tools.Result{}, context.Cause(ctx)
		}
	}))
	beats := watchBeats(t, b)
	tool := b.lookup(t, "long", remote.DiscoverConfig{CallTimeout: 10 * time.Minute, Heartbeat: stallProofBeat})
	type outcome struct {
		res tools.Result
		err error
	}
	out := make(chan outcome, 1)
	go func() {
		res, err := tool.Call(t.Context(), tools.Call{ID: "c1"})
		out <- outcome{res, err}
	}()
	// The first beat comes as the call starts; HeartbeatMisses+2 beats
	// span more than the silence that would fail the call.
	for range remote.HeartbeatMisses + 2 {
		select {
		case <-beats:
		case o := <-out:
			t.Fatalf("the call ended before its result: %v", o.err)
		case <-time.After(waitLimit):
			t.Fatal("no heartbeat within a minute")
		}
	}
	close(release)
	o := <-out
	if o.err != nil || text(o.res) != "done" {
		t.Fatalf("call = %q, %v", text(o.res), o.err)
	}
}

// TestServiceVersion: a build's version becomes one micro takes.
func TestServiceVersion(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"v1.2.3":       "1.2.3",
		"1.2.3-rc.1":   "1.2.3-rc.1",
		"v0.4.0+dirty": "0.4.0+dirty",
		"(devel)":      remote.VersionDefault,
		"":             remote.VersionDefault,
		"v1.2":         remote.VersionDefault,
		"unknown":      remote.VersionDefault,
	} {
		if got := remote.ServiceVersion(in); got != want {
			t.Errorf("ServiceVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

// slowJSON is a result detail whose encoding lasts until the caller's
// reply subject has had beats spanning more than the silence that fails
// a call, or until the call ended: a large result's encoding on a busy
// machine, made an event the test can wait on.
type slowJSON struct {
	beats <-chan struct{}
	ended <-chan struct{}
	once  *sync.Once
}

func (s slowJSON) MarshalJSON() ([]byte, error) {
	s.once.Do(func() {
		for len(s.beats) > 0 { // only beats sent while encoding count
			<-s.beats
		}
		for range remote.HeartbeatMisses + 2 {
			select {
			case <-s.beats:
			case <-s.ended:
				return
			}
		}
	})
	return []byte(`"slow"`), nil
}

// TestEncodingKeepsCallAlive: the service beats until its reply is
// encoded, not only while the tool runs, so a result whose encoding
// outlasts the caller's silence (megabytes of images under load: CI's
// TestResultImagesCapped failed with "no heartbeat for 15s") still
// reaches the caller. Before, the beats stopped when the tool returned
// and the call failed as lost.
func TestEncodingKeepsCallAlive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	beats, ended := watchBeats(t, b), make(chan struct{})
	b.serve(t, b.server, remote.ServiceConfig{}, newTool("heavy", func(context.Context, tools.Call) (tools.Result, error) {
		return tools.Result{Content: []message.Block{message.Text("done")},
			Details: map[string]any{"encoding": slowJSON{beats: beats, ended: ended, once: &sync.Once{}}}}, nil
	}))
	tool := b.lookup(t, "heavy", remote.DiscoverConfig{CallTimeout: 10 * time.Minute, Heartbeat: stallProofBeat})
	res, err := tool.Call(t.Context(), tools.Call{ID: "c1"})
	close(ended)
	if err != nil || text(res) != "done" {
		t.Fatalf("call = %q, %v", text(res), err)
	}
}

// watchBeats returns a channel that gets the heartbeats sent to any
// inbox on b's server from now on (dropped when 64 are waiting).
func watchBeats(t *testing.T, b *bundle) <-chan struct{} {
	t.Helper()
	watch := natstest.Connect(t, b.url)
	beats := make(chan struct{}, 64)
	sub, err := watch.Subscribe("_INBOX.>", func(m *nats.Msg) {
		if m.Header.Get(remote.HeaderBeat) == "1" {
			select {
			case beats <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	return beats
}
