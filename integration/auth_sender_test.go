package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/permission"
)

// syncBuffer is a process's output, readable while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a worker process and its output.
type proc struct {
	cmd    *exec.Cmd
	logs   *syncBuffer
	exited chan struct{} // closed when it exited; err is then set
	err    error
}

// workerProcess runs cmd/worker with its own embedded server (no NATS_URL)
// and the given environment additions.
func workerProcess(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	args = append([]string{"--scripted", "--log-format", "json", "--log-level", "info", "--shutdown-grace", "2s"}, args...)
	p := &proc{cmd: exec.Command(workerBinary(t), args...), logs: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd.Env = append(p.cmd.Environ(), "NATS_URL=")
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("worker output:\n%s", p.logs.String())
		}
	})
	return p
}

// wait waits for the process to exit and returns how it ended.
func (p *proc) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(time.Minute):
		t.Fatal("worker still running after a minute")
		return nil
	}
}

// waitReady waits until the worker process logged that it is ready, or
// fails when it exits first.
func (p *proc) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.After(time.Minute)
	for !strings.Contains(p.logs.String(), `"message":"ready"`) {
		select {
		case <-p.exited:
			t.Fatalf("worker exited before it was ready: %v", p.err)
		case <-deadline:
			t.Fatal("worker not ready after a minute")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop stops the worker with SIGTERM and returns how it exited.
func (p *proc) stop(t *testing.T) error {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	return p.wait(t)
}

// TestSenderIsolation: a worker process runs its embedded server from a
// configuration file with a user per role, listening on every interface
// (allowed: it authenticates), and connects as the worker user. A sender
// sends to its own session and follows the run live; everything else it
// tries (another session's inbound, events and lane service, the auth and
// lanes buckets, the dead letters) is a permission violation, an
// anonymous connection and a wrong password are refused, and no password
// reaches the worker's output.
func TestSenderIsolation(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	t.Parallel()
	a := newAuthFleet(t, roleUsers(), "")
	w := workerProcess(t, []string{"NATS_PASSWORD=" + a.passwords["worker"]},
		"--id", "iso", "--server-config", a.file, "--nats-user", "worker", "--listen", fmt.Sprintf("0.0.0.0:%d", a.port))
	w.waitReady(t)

	if _, err := nats.Connect(a.url()); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("anonymous connection: %v, want an authorization violation", err)
	}
	if _, err := nats.Connect(a.url(), nats.UserInfo("alice", a.passwords["bob"])); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("wrong password: %v, want an authorization violation", err)
	}

	alice := a.connectAs(t, "alice")
	live := subscribeEvents(t, alice, "alice")
	run := sendRaw(t, alice, "alice", events.Inbound{Text: "hello"})
	evs := live.run(t, run)
	if f := evs[len(evs)-1].Data.Result; f == nil || len(f.Payloads) == 0 || f.Payloads[0].Text != "echo: hello" {
		t.Fatalf("alice's run ended with %+v", evs[len(evs)-1].Data)
	}

	bobTok, _ := events.KeyToken("bob")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	pub := func(what, subject string) {
		t.Helper()
		if err := alice.nc.Publish(subject, []byte("x")); err != nil {
			t.Fatal(err)
		}
		alice.denied(t, what, subject)
	}
	sub := func(what, subject string) {
		t.Helper()
		if _, err := alice.nc.SubscribeSync(subject); err != nil {
			t.Fatal(err)
		}
		alice.denied(t, what, subject)
	}
	// The JetStream API: a request that is never answered; the violation
	// says why.
	api := func(what, subject string, call func(context.Context) error) {
		t.Helper()
		cctx, ccancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- call(cctx) }()
		alice.denied(t, what, subject)
		ccancel()
		if err := <-done; err == nil {
			t.Errorf("%s succeeded", what)
		}
	}

	pub("bob's inbound", events.InboundPrefix+bobTok)
	sub("bob's events", events.EventPrefix+bobTok+".>")
	pub("bob's history", permission.ServicePrefix+bobTok+".history")
	pub("a dead letter", events.DeadPrefix+"forged")
	sub("the dead letters", events.DeadPrefix+">")
	pub("a write to the auth bucket", "$KV.auth.profile.openai")
	sub("the lanes bucket", "$KV.lanes.>")
	api("the auth bucket", "$JS.API.STREAM.INFO.KV_auth", func(ctx context.Context) error {
		_, err := alice.js.KeyValue(ctx, permission.AuthBucket)
		return err
	})
	api("the lanes bucket's stream", "$JS.API.STREAM.INFO.KV_lanes", func(ctx context.Context) error {
		_, err := alice.js.KeyValue(ctx, permission.LanesBucket)
		return err
	})
	// Another user's inbox prefix: replies meant for bob.
	sub("bob's inbox", permission.InboxPrefix("bob")+".>")

	if err := w.stop(t); err != nil {
		t.Fatalf("worker exit: %v", err)
	}
	for user, pw := range a.passwords {
		if strings.Contains(w.logs.String(), pw) {
			t.Fatalf("the password of %s is in the worker's output", user)
		}
	}
}

// TestWorkerWithoutItsIdentity: a worker whose embedded server requires
// users but that was given a wrong password exits with an error that says
// which flags give its identity, and without the password.
func TestWorkerWithoutItsIdentity(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	t.Parallel()
	a := newAuthFleet(t, roleUsers()[:1], "")
	const wrong = "not-the-password-1234"
	w := workerProcess(t, []string{"NATS_PASSWORD=" + wrong}, "--server-config", a.file, "--nats-user", "worker")
	if err := w.wait(t); err == nil {
		t.Fatal("the worker ran without its identity")
	}
	out := w.logs.String()
	if !strings.Contains(out, "--nats-user") || !strings.Contains(out, "--creds") {
		t.Fatalf("the error does not say what to give:\n%s", out)
	}
	if strings.Contains(out, wrong) {
		t.Fatalf("the password is in the output:\n%s", out)
	}
}
