package integration

// The fault suite (fault_*_test.go): real nats-server processes built from
// the module's version (natstest.StartProcCluster), worker processes
// (cmd/worker), faults by PID. Every case audits the stored events of every
// run it sent and prints how many finals were lost or duplicated.

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
)

// procWorker is a cmd/worker process whose output can be read while it runs.
type procWorker struct {
	id   string
	url  string
	args []string
	t    *testing.T

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	logs bytes.Buffer
	// wrote is closed (and replaced) by every write: waitLog's wake-up.
	wrote chan struct{}
}

func (w *procWorker) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.wrote != nil {
		close(w.wrote)
	}
	w.wrote = make(chan struct{})
	return w.logs.Write(p)
}

// waitLog waits until the process has written a line containing sub,
// waking at each write, and fails the test after timeout.
func (w *procWorker) waitLog(t *testing.T, sub string, timeout time.Duration) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		found := bytes.Contains(w.logs.Bytes(), []byte(sub))
		if w.wrote == nil {
			w.wrote = make(chan struct{})
		}
		wrote := w.wrote
		w.mu.Unlock()
		if found {
			return
		}
		select {
		case <-wrote:
		case <-deadline.C:
			t.Fatalf("worker %s did not log %q within %v", w.id, sub, timeout)
		case <-t.Context().Done():
			t.Fatalf("worker %s did not log %q: %v", w.id, sub, t.Context().Err())
		}
	}
}

// startWorkerProc starts cmd/worker joined to url with short fault timings
// (AckWait and lease TTL 2s); it is killed when the test ends.
func startWorkerProc(t *testing.T, url, id string, extra ...string) *procWorker {
	t.Helper()
	w := &procWorker{id: id, url: url, t: t, args: append([]string{"--id", id, "--ack-wait", "2s", "--lease-ttl", "2s",
		"--log-format", "json", "--log-level", "warn", "--shutdown-grace", "2s", "--no-builtin-tools", "--scripted",
		"--agent-cache-dir", t.TempDir()}, extra...)}
	w.start()
	t.Cleanup(func() {
		w.signal(syscall.SIGCONT)
		w.kill()
		if t.Failed() {
			t.Logf("worker %s output:\n%s", id, w.output())
		}
	})
	return w
}

func (w *procWorker) start() {
	w.t.Helper()
	cmd := exec.Command(workerBinary(w.t), w.args...)
	cmd.Env = append(cmd.Environ(), "NATS_URL="+w.url)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	w.mu.Lock()
	w.cmd, w.done = cmd, done
	w.mu.Unlock()
}

func (w *procWorker) signal(sig syscall.Signal) {
	w.mu.Lock()
	cmd := w.cmd
	w.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(sig)
	}
}

// kill SIGKILLs the process and waits for it.
func (w *procWorker) kill() {
	w.signal(syscall.SIGKILL)
	w.wait()
}

// wait waits for the process to exit.
func (w *procWorker) wait() {
	w.mu.Lock()
	done := w.done
	w.mu.Unlock()
	if done != nil {
		<-done
	}
}

func (w *procWorker) output() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.logs.String()
}

// logLines returns the output lines containing any of subs.
func (w *procWorker) logLines(subs ...string) []string {
	var out []string
	for _, l := range strings.Split(w.output(), "\n") {
		for _, s := range subs {
			if strings.Contains(l, s) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

// runRef is one sent message: its session and run id (inbound sequence).
type runRef struct {
	session, run, text string
}

// sendOrdered publishes msgs one at a time, each retried with its message id
// until acknowledged (a retry of a stored message returns its sequence), and
// returns their runs.
func sendOrdered(t *testing.T, js jetstream.JetStream, msgs []outMsg) []runRef {
	t.Helper()
	var runs []runRef
	for _, m := range msgs {
		r, err := publishRetried(t.Context(), js, m)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	return runs
}

// finalWatch counts, per run subject, the final events a core subscriber
// sees (publishes the stream refused included).
type finalWatch struct {
	mu     sync.Mutex
	finals map[string]int
}

func watchRunFinals(t *testing.T, url string) *finalWatch {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	f := &finalWatch{finals: map[string]int{}}
	sub, err := nc.Subscribe(events.EventPrefix+">", func(m *nats.Msg) {
		if m.Header.Get(events.HeaderStream) != events.StreamFinal {
			return
		}
		f.mu.Lock()
		f.finals[m.Subject]++
		f.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return f
}

// count returns how many final events of the session's run at inbound
// sequence seq the subscriber saw.
func (f *finalWatch) count(session string, seq uint64) int {
	subj, _ := events.EventSubject(session, strconv.FormatUint(seq, 10))
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.finals[subj]
}

// waitAll waits until every run's final event is stored, failing the test
// (not stopping it: the audit counts what is missing) after timeout. It
// follows the event stream in order from its start (eventPass) and ticks
// off each run whose stored event is a final; a core subscription's finals
// are no proof (it also sees publishes the stream refused).
func (f *finalWatch) waitAll(t *testing.T, js jetstream.JetStream, runs []runRef, timeout time.Duration) {
	t.Helper()
	owed := make(map[string]runRef, len(runs)) // by event subject
	for _, r := range runs {
		subj, err := events.EventSubject(r.session, r.run)
		if err != nil {
			t.Fatal(err)
		}
		owed[subj] = r
	}
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	tick := func(m jetstream.Msg) error {
		if _, ok := owed[m.Subject()]; !ok {
			return nil
		}
		// An event that does not decode is left for the audit to fail on.
		if ev, err := events.DecodeEvent(m.Headers().Get(events.HeaderContentType), m.Data()); err == nil && ev.Terminal() {
			delete(owed, m.Subject())
		}
		return nil
	}
	done := func(bool) bool { return len(owed) == 0 }
	began := time.Now()
	var p *eventPass
	for len(owed) > 0 {
		var err error
		if p == nil {
			p, err = newEventPass(ctx, js, 1, t.Logf)
		}
		if err == nil {
			// A pass gives up after consumer failures in a row (a
			// cluster still electing): go on from where it stopped.
			err = p.run(ctx, tick, done)
		}
		if ctx.Err() != nil && len(owed) > 0 {
			var example runRef
			for _, example = range owed {
				break
			}
			t.Errorf("%d of %d runs have no stored final event after %v, e.g. %+v", len(owed), len(runs), timeout, example)
			return
		}
		if err != nil {
			t.Logf("waiting for finals: %v", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	if p != nil {
		t.Logf("finals stored: %d events read in %v (%d consumers)", p.read, time.Since(began).Round(time.Millisecond), p.consumers)
	}
}

// runAudit is what one run's stored events say (runAudit.add folds them
// in, in stream order).
type runAudit struct {
	finals int
	// stale counts events of an older attempt stored after a newer
	// attempt's first event (a zombie's events); backwards counts events
	// whose seq does not grow.
	stale, backwards int
	// errKind is the error kind of the run's (first) final event, if it
	// carries one: every message the fault suite sends is healthy, so a
	// "poison_message" is a healthy message dead-lettered.
	errKind string
	// lastSeq and newest are the seq and the newest attempt of the events
	// folded in so far.
	lastSeq uint64
	newest  int
}

// auditCounts is what audit found, run by run, and in the dead-letter
// stream.
type auditCounts struct {
	runs, lost, dup, stale, backwards int
	// failed counts runs whose final carries an error, by kind: the fault
	// suite sends only healthy messages.
	failed map[string]int
	// deadLetters is what the dead-letter stream holds (every one a
	// healthy message); poison counts runs ended as poison.
	deadLetters uint64
	poison      int
	examples    []string
}

// healthyDeadLettered counts the healthy messages dead-lettered: runs ended
// as poison, or dead letters stored, whichever is more.
func (c auditCounts) healthyDeadLettered() int {
	return max(c.poison, int(c.deadLetters))
}

// bad reports whether any count is a defect.
func (c auditCounts) bad() bool {
	return c.lost+c.dup+c.stale+c.backwards+c.healthyDeadLettered() > 0 || len(c.failed) > 0
}

func (c auditCounts) String() string {
	return fmt.Sprintf("audit of %d runs: lost finals %d, duplicated finals %d, stale-attempt events %d, seq going back %d, "+
		"healthy messages dead-lettered %d (poison finals %d, dead letters %d), error finals %v",
		c.runs, c.lost, c.dup, c.stale, c.backwards, c.healthyDeadLettered(), c.poison, c.deadLetters, c.failed)
}

// audit checks every run's stored events: exactly one final, no event of an
// older attempt after a newer one began, seq growing, no final carrying an
// error and nothing dead-lettered. It prints the counts and fails the test
// on any.
func audit(t *testing.T, js jetstream.JetStream, runs []runRef) {
	t.Helper()
	c := auditAll(t, js, runs)
	t.Log(c)
	if c.bad() {
		t.Fatalf("events of runs are wrong: %s", strings.Join(c.examples, "; "))
	}
}

// auditAll counts what audit checks, from one ordered read of the event
// stream (auditEvents).
func auditAll(t *testing.T, js jetstream.JetStream, runs []runRef) auditCounts {
	t.Helper()
	c := auditCounts{runs: len(runs), failed: map[string]int{}}
	var (
		byRun map[string]*runAudit
		err   error
	)
	for try := 0; try < 3; try++ {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		byRun, err = auditEvents(ctx, js, runs, t.Logf)
		cancel()
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	for _, r := range runs {
		subj, _ := events.EventSubject(r.session, r.run) // auditEvents checked it
		a := byRun[subj]
		switch {
		case a.finals == 0:
			c.lost++
		case a.finals > 1:
			c.dup++
		}
		c.stale += a.stale
		c.backwards += a.backwards
		if a.errKind != "" {
			c.failed[a.errKind]++
			if a.errKind == "poison_message" {
				c.poison++
			}
		}
		if (a.finals != 1 || a.stale > 0 || a.backwards > 0 || a.errKind != "") && len(c.examples) < 5 {
			c.examples = append(c.examples, fmt.Sprintf("%s/%s: %d finals, %d stale, %d backwards, error %q", r.session, r.run, a.finals, a.stale, a.backwards, a.errKind))
		}
	}
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		info, err := js.Stream(ctx, events.DeadStream)
		if err == nil {
			c.deadLetters = info.CachedInfo().State.Msgs
		}
		cancel()
		if err == nil || try >= 4 {
			if err != nil {
				t.Fatalf("dead-letter stream: %v", err)
			}
			break
		}
	}
	if c.deadLetters > 0 && len(c.examples) < 5 {
		c.examples = append(c.examples, fmt.Sprintf("%d dead letters", c.deadLetters))
	}
	return c
}

// staleSeen counts, per run, what a core subscriber on agent.ev.> saw of an
// older attempt after a newer attempt's first event: publishes the stream
// refused reach core subscribers too.
type staleSeen struct {
	mu     sync.Mutex
	newest map[string]int
	late   map[string]int
}

func watchStale(t *testing.T, url string) *staleSeen {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s := &staleSeen{newest: map[string]int{}, late: map[string]int{}}
	sub, err := nc.Subscribe(events.EventPrefix+">", func(m *nats.Msg) {
		if strings.HasSuffix(m.Subject, "."+lanes.FenceToken) || strings.HasSuffix(m.Subject, "."+lanes.UncountedToken) {
			return
		}
		ev, err := events.DecodeEvent(m.Header.Get(events.HeaderContentType), m.Data)
		if err != nil {
			return
		}
		att := ev.Attempt
		s.mu.Lock()
		defer s.mu.Unlock()
		if ev.Data.Phase == events.PhaseAborted {
			att = max(att, s.newest[m.Subject])
		}
		if att < s.newest[m.Subject] && !ev.Terminal() {
			s.late[m.Subject]++
		}
		s.newest[m.Subject] = max(s.newest[m.Subject], att)
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return s
}

// worst returns the most late events any one run showed, and the total.
func (s *staleSeen) worst() (most, total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.late {
		most = max(most, n)
		total += n
	}
	return most, total
}

// heldBy waits until worker id holds at least least of the sessions' lanes
// and returns them.
func heldBy(t *testing.T, js jetstream.JetStream, id string, sessions []string, least int, timeout time.Duration) []string {
	t.Helper()
	var held []string
	waitUntil(t, timeout, fmt.Sprintf("worker %s holding %d lanes", id, least), func(context.Context) bool {
		held = holders(t, js, id, sessions)
		return len(held) >= least
	})
	return held
}

// holders returns the sessions whose lane worker id holds.
func holders(t *testing.T, js jetstream.JetStream, id string, sessions []string) []string {
	t.Helper()
	l, err := kvstore.Bind(t.Context(), js, "")
	if err != nil {
		return nil
	}
	var held []string
	for _, s := range sessions {
		tok, _ := events.KeyToken(s)
		if h, ok, err := l.Holder(t.Context(), tok); err == nil && ok && h.Worker == id {
			held = append(held, s)
		}
	}
	return held
}

// cursors returns the inbound sequence each session's lane has committed
// through (sessions whose cursor cannot be read are left out).
func cursors(t *testing.T, js jetstream.JetStream, sessions []string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	l, err := kvstore.Bind(t.Context(), js, "")
	if err != nil {
		return out
	}
	for _, s := range sessions {
		tok, _ := events.KeyToken(s)
		if c, err := l.Cursor(t.Context(), tok); err == nil {
			out[s] = c.Seq
		}
	}
	return out
}

// faultLoad is sessions × perSession messages of a few words each (the
// scripted echo model streams one delta per word).
func faultLoad(prefix string, sessions, perSession int) (msgs []outMsg, keys []string, want map[string][]string) {
	want = map[string][]string{}
	for s := range sessions {
		keys = append(keys, fmt.Sprintf("%s:%d", prefix, s))
	}
	for i := range perSession {
		for s, key := range keys {
			text := fmt.Sprintf("message %d of session %d in a few more words", i, s)
			msgs = append(msgs, outMsg{key, text, fmt.Sprintf("%s-%d-%d", prefix, s, i)})
			want[key] = append(want[key], text)
		}
	}
	return msgs, keys, want
}
