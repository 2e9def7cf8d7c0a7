// Package integration holds black-box tests of the whole fleet: real
// embedded nats-servers (single node and a 3-node cluster), workers as
// in-process members on their own connections or as separate OS processes,
// the Go client, and the scripted model.
package integration

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/sandbox"
)

// callTimeout bounds one call to JetStream or the fleet that a test makes
// without a deadline of its own. It only detects a hang: nats.go's
// default is 5 s, which single requests outlasted on a loaded machine,
// and CI's machine is slower than a developer's.
const callTimeout = time.Minute

// callCtx is a context of callTimeout for a test's calls, cancelled when
// the test ends.
func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

// newJS is a JetStream client of nc whose calls without a deadline of
// their own wait up to callTimeout, for a server the test does not
// stop: a request lost to a killed node is better retried after a few
// seconds (see connectProcs).
func newJS(t *testing.T, nc *nats.Conn, opts ...jetstream.JetStreamOpt) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc, append([]jetstream.JetStreamOpt{jetstream.WithDefaultTimeout(callTimeout)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// member starts an in-process fleet member on its own connection and stops it
// (gracefully) when the test ends or stop is called.
type member struct {
	m    *fleet.Member
	stop func()
	done chan struct{}
}

func startMember(t *testing.T, url string, cfg fleet.Config) *member {
	t.Helper()
	return startMemberLog(t, url, cfg, nil)
}

// startMemberLog is startMember with the member's warnings also written to
// w (when not nil).
func startMemberLog(t *testing.T, url string, cfg fleet.Config, w io.Writer) *member {
	t.Helper()
	cfg.NATSURL = url
	cfg.Scripted = true // tests drive the fleet with the scripted models
	if cfg.AckWait == 0 {
		cfg.AckWait = 5 * time.Second
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 5 * time.Second
	}
	var out io.Writer = zerolog.NewTestWriter(t)
	if w != nil {
		out = io.MultiWriter(out, w)
	}
	cfg.Logger = zerolog.New(out).Level(zerolog.WarnLevel).With().Str("worker", cfg.WorkerID).Logger()
	m, err := fleet.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	mem := &member{m: m, done: make(chan struct{})}
	go func() {
		defer close(mem.done)
		if err := m.Run(ctx); err != nil {
			t.Errorf("member %s: %v", cfg.WorkerID, err)
		}
	}()
	var once sync.Once
	mem.stop = func() { once.Do(func() { cancel(); <-mem.done }) }
	t.Cleanup(mem.stop)
	return mem
}

// finals counts final events per run as they are published, through a core
// subscription on the event subjects.
type finals struct {
	mu     sync.Mutex
	seen   map[string]*events.Event // subject -> final event
	dups   int
	notify chan struct{}
}

func watchFinals(t *testing.T, nc *nats.Conn) *finals {
	t.Helper()
	f := &finals{seen: map[string]*events.Event{}, notify: make(chan struct{}, 1)}
	sub, err := nc.Subscribe(events.EventPrefix+">", func(m *nats.Msg) {
		if m.Header.Get(events.HeaderStream) != events.StreamFinal {
			return
		}
		ev, err := events.DecodeEvent(m.Header.Get(events.HeaderContentType), m.Data)
		if err != nil {
			t.Errorf("bad final event on %s: %v", m.Subject, err)
			return
		}
		f.mu.Lock()
		if _, ok := f.seen[m.Subject]; ok {
			f.dups++
		}
		f.seen[m.Subject] = ev
		f.mu.Unlock()
		select {
		case f.notify <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *finals) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.seen)
}

// waitFor waits until n distinct runs have a final event.
func (f *finals) waitFor(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for f.count() < n {
		select {
		case <-f.notify:
		case <-time.After(time.Second):
		case <-deadline:
			t.Fatalf("only %d of %d runs finished within %v", f.count(), n, timeout)
		}
	}
}

// publishAll publishes msgs (session, text) asynchronously with message ids
// and waits for every ack, retrying failures with the same id. On a healthy
// connection async publishes are stored in the order sent; use publishOrdered
// where connections drop, since a lost publish retried later would land
// after its session's next messages.
type outMsg struct{ session, text, id string }

func publishAll(t *testing.T, js jetstream.JetStream, msgs []outMsg) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	pending := msgs
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt > 20 {
			t.Fatalf("%d messages not acknowledged after retries", len(pending))
		}
		type fut struct {
			m outMsg
			f jetstream.PubAckFuture
		}
		var futs []fut
		var failed []outMsg
		for _, m := range pending {
			subj, err := events.InboundSubject(m.session)
			if err != nil {
				t.Fatal(err)
			}
			data, ct, _ := events.EncodeInbound(&events.Inbound{Text: m.text, ID: m.id}, false)
			msg := nats.NewMsg(subj)
			msg.Data = data
			msg.Header.Set(events.HeaderContentType, ct)
			// A long stall wait: an async publish that is refused at once
			// (too many outstanding) would be retried after later messages of
			// its session and so land out of order.
			f, err := js.PublishMsgAsync(msg, jetstream.WithMsgID(m.id), jetstream.WithStallWait(time.Minute))
			if err != nil {
				failed = append(failed, m)
				continue
			}
			futs = append(futs, fut{m, f})
		}
		for _, f := range futs {
			select {
			case <-f.f.Ok():
			case <-f.f.Err():
				failed = append(failed, f.m)
			case <-ctx.Done():
				t.Fatal("publish timed out")
			}
		}
		pending = failed
		if len(pending) > 0 {
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// checkTranscripts asserts each session's transcript holds exactly its
// messages, in publish order, each answered once.
func checkTranscripts(t *testing.T, c *lanefleet.Client, want map[string][]string) {
	t.Helper()
	if defects := transcriptDefects(t, c, want); len(defects) > 0 {
		t.Fatalf("%d of %d transcripts are wrong; %s", len(defects), len(want), defects[0])
	}
}

// transcriptDefects checks every session's transcript as checkTranscripts
// does and says what is wrong with each that is (one line per session). It
// reads historyReaders transcripts at a time: one by one, the 500 of
// TestThreeWorkers500Sessions took 108 s of a loaded run.
func transcriptDefects(t *testing.T, c *lanefleet.Client, want map[string][]string) []string {
	t.Helper()
	var (
		mu      sync.Mutex
		defects []string
		failed  error
		wg      sync.WaitGroup
		next    = make(chan string)
	)
	for range historyReaders {
		wg.Go(func() {
			for session := range next {
				entries, err := historyRetried(t, c, session)
				mu.Lock()
				switch {
				case err != nil:
					failed = cmp.Or(failed, fmt.Errorf("history of %q: %w", session, err))
				default:
					if why := transcriptDefect(entries, want[session]); why != "" {
						defects = append(defects, fmt.Sprintf("session %q %s", session, why))
					}
				}
				mu.Unlock()
			}
		})
	}
	for session := range want {
		next <- session
	}
	close(next)
	wg.Wait()
	if failed != nil {
		t.Fatal(failed)
	}
	slices.Sort(defects)
	return defects
}

// historyReaders is how many transcripts transcriptDefects reads at once.
const historyReaders = 8

// historyRetried reads a session's history, trying up to five times (each
// try bounded by 20 s).
func historyRetried(t *testing.T, c *lanefleet.Client, session string) ([]message.Entry, error) {
	var (
		entries []message.Entry
		err     error
	)
	for range 5 {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		entries, err = c.History(ctx, session)
		cancel()
		if err == nil {
			break
		}
	}
	return entries, err
}

// transcriptDefect says what is wrong with a transcript that should hold
// texts, each answered once by the scripted echo model ("" = nothing).
func transcriptDefect(entries []message.Entry, texts []string) string {
	var users, answers []string
	for _, e := range entries {
		if e.Message == nil {
			continue
		}
		switch e.Message.Role {
		case message.RoleUser:
			users = append(users, e.Message.Content.Text())
		case message.RoleAssistant:
			answers = append(answers, e.Message.Content.Text())
		}
	}
	if strings.Join(users, "|") != strings.Join(texts, "|") {
		return fmt.Sprintf("user turns:\n got %q\nwant %q", users, texts)
	}
	if len(answers) != len(texts) {
		return fmt.Sprintf("has %d answers for %d turns", len(answers), len(texts))
	}
	for i, a := range answers {
		if a != "echo: "+texts[i] {
			return fmt.Sprintf("answer %d = %q, want %q", i, a, "echo: "+texts[i])
		}
	}
	return ""
}

var (
	buildOnce sync.Once
	workerBin string
	buildErr  error
)

// workerBinary returns cmd/worker, built once per test binary.
func workerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(buildWorker)
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return workerBin
}

// buildWorker builds cmd/worker into a temporary directory.
func buildWorker() {
	dir, err := os.MkdirTemp("", "lanefleet-bin")
	if err != nil {
		buildErr = err
		return
	}
	workerBin = filepath.Join(dir, "worker")
	out, err := exec.Command("go", "build", "-o", workerBin, "../cmd/worker").CombinedOutput()
	if err != nil {
		buildErr = fmt.Errorf("go build: %v\n%s", err, out)
	}
}

func TestMain(m *testing.M) {
	sandbox.Main() // in-process members confine exec's commands with this binary
	flag.Parse()
	if !testing.Short() && flag.Lookup("test.list").Value.String() == "" {
		// Built before any test starts, so no test's deadline pays for
		// it: under -race at a load of 25 the build and the worker's
		// start outlasted TestKilledWorkersReservationExpires's 90 s
		// context, created before its first worker process.
		buildOnce.Do(buildWorker)
	}
	code := m.Run()
	if workerBin != "" {
		os.RemoveAll(filepath.Dir(workerBin))
	}
	natstest.RemoveServerBinary()
	os.Exit(code)
}

// waitDrained waits until the fleet has processed everything: the inbound
// stream is empty (processed messages are deleted) and the dispatch consumer
// has nothing pending or un-acked. It reads durable state, so it cannot miss
// a notification the way a core subscription can under load.
func waitDrained(t *testing.T, js jetstream.JetStream, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	var state string // the last state seen: what was stuck
	var lookErr error
	for {
		// Each look has a deadline of its own: one request lost to a
		// failover must not take the whole wait, nor its deadline's
		// error hide the last state seen.
		lctx, lcancel := context.WithTimeout(ctx, 15*time.Second)
		seen, drained, err := lookDrained(t, lctx, js)
		lcancel()
		if drained {
			return
		}
		if seen != "" {
			state = seen
		}
		lookErr = err
		select {
		case <-ctx.Done():
			if f, err := os.CreateTemp("", "lanefleet-goroutines-*.txt"); err == nil {
				_ = pprof.Lookup("goroutine").WriteTo(f, 1)
				f.Close()
				t.Logf("goroutines written to %s", f.Name())
			}
			t.Fatalf("fleet not drained within %v: last seen %q; last look's error: %v", timeout, state, lookErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// lookDrained looks once whether the fleet is drained; when not, it says
// what it saw (empty when the look failed before it saw anything).
func lookDrained(t *testing.T, ctx context.Context, js jetstream.JetStream) (seen string, drained bool, err error) {
	t.Helper()
	s, err := js.Stream(ctx, events.InboundStream)
	if err != nil {
		return "", false, err
	}
	cons, err := js.Consumer(ctx, events.InboundStream, "dispatch")
	if err != nil {
		return "", false, err
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		return "", false, err
	}
	st := s.CachedInfo().State
	if info, ierr := s.Info(ctx); ierr == nil {
		st = info.State
	}
	seen = fmt.Sprintf("inbound msgs=%d, dispatch pending=%d ack-pending=%d", st.Msgs, ci.NumPending, ci.NumAckPending)
	if st.Msgs == 0 && ci.NumPending == 0 && ci.NumAckPending == 0 {
		return seen, true, nil
	}
	if ci.NumPending != 0 || ci.NumAckPending != 0 {
		return seen, false, nil
	}
	// Messages left with nothing pending: they must all be processed
	// ones whose purge failed (e.g. during a failover); an unprocessed
	// one is stranded.
	stranded, err := unprocessed(ctx, js, s, st)
	if err != nil {
		return seen, false, err
	}
	if len(stranded) == 0 {
		t.Logf("drained; %d processed messages left unpurged", st.Msgs)
		return seen, true, nil
	}
	return fmt.Sprintf("%s; stranded: %v", seen, stranded), false, nil
}

// publishOrdered publishes msgs one at a time, each retried with its message
// id until acknowledged, so a session's messages keep their order through
// node failures and reconnects.
func publishOrdered(t *testing.T, js jetstream.JetStream, msgs []outMsg) {
	t.Helper()
	for _, m := range msgs {
		subj, err := events.InboundSubject(m.session)
		if err != nil {
			t.Fatal(err)
		}
		data, ct, _ := events.EncodeInbound(&events.Inbound{Text: m.text, ID: m.id}, false)
		for attempt := 0; ; attempt++ {
			msg := nats.NewMsg(subj)
			msg.Data = data
			msg.Header.Set(events.HeaderContentType, ct)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			_, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(m.id))
			cancel()
			if err == nil {
				break
			}
			if attempt > 50 {
				t.Fatalf("publish %s: %v", m.id, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// unprocessed lists the inbound messages above their lane's cursor.
func unprocessed(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, st jetstream.StreamState) ([]string, error) {
	l, err := kvstore.Bind(ctx, js, "")
	if err != nil {
		return nil, err
	}
	var out []string
	for seq := st.FirstSeq; seq <= st.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		tok, _, err := events.LaneOf(m.Subject)
		if err != nil {
			out = append(out, fmt.Sprintf("%d(bad lane)", seq))
			continue
		}
		c, err := l.Cursor(ctx, tok)
		if err != nil {
			return nil, err
		}
		if c.Seq < seq {
			out = append(out, fmt.Sprintf("%s@%d(cursor %d)", m.Subject, seq, c.Seq))
		}
	}
	return out, nil
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// envMap is a worker environment holding exactly m (fleet.Config.Env).
func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}
