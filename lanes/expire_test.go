package lanes

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/retention"
)

// expireLeaseTTL is the lease TTL of the retention tests' fleets. A forget
// sends its purges only while less than a third of the lease TTL has passed
// since it renewed the lane's lease (kvstore.Lease.Forget): with 2 s, a
// loaded machine's 684 ms renewal made the forget give up ("a third of the
// lease TTL: nothing removed") and TestExpireSkipsAFailingLane count four
// failed lanes instead of one. No test here waits for a lease to lapse.
const expireLeaseTTL = 30 * time.Second

// runWorker runs a worker on its own connection until the test ends and
// returns it.
func (f *fleet) runWorker(t *testing.T, h Handler, cfg Config) *Worker {
	t.Helper()
	w := f.newWorker(t, natstest.Connect(t, f.url), h, cfg, zerolog.WarnLevel)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	return w
}

func (f *fleet) publishSettings(t *testing.T, key string, q *events.QueueSettings) uint64 {
	t.Helper()
	subj, _ := events.InboundSubject(key)
	data, ct, _ := events.EncodeInbound(&events.Inbound{QueueSettings: q}, false)
	m := nats.NewMsg(subj)
	m.Data = data
	m.Header.Set(events.HeaderContentType, ct)
	ack, err := f.js.PublishMsg(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

func (f *fleet) records(t *testing.T, key string) int {
	t.Helper()
	tok, _ := events.KeyToken(key)
	recs, err := f.lanes.Records(t.Context(), tok)
	if err != nil {
		t.Fatal(err)
	}
	return len(recs)
}

// TestExpireIdleForgetsOnlyIdleSessions: a retention pass forgets a
// session untouched since the cutoff (records and settings), and keeps a
// session written after it, one whose lane someone holds, and one with a
// message waiting; a forgotten session that speaks again starts over; a
// second pass starts where the first stopped.
func TestExpireIdleForgetsOnlyIdleSessions(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Second, expireLeaseTTL)
	var (
		mu      sync.Mutex
		history = map[string]int{}
	)
	h := &echoHandler{hook: func(t *Turn) error {
		mu.Lock()
		history[t.SessionKey+"/"+t.Inbound.Text] = len(t.History)
		mu.Unlock()
		return nil
	}}
	w := f.runWorker(t, h, Config{SweepEvery: -1})
	for _, key := range []string{"idle", "held", "later", "waiting"} {
		f.waitFinal(t, key, f.publish(t, key, "one"))
	}
	f.waitFinal(t, "idle", f.publishSettings(t, "idle", &events.QueueSettings{Mode: "collect"}))
	// The pass's cutoff falls here: "later" speaks after it.
	cutoff := time.Now()
	f.waitFinal(t, "later", f.publish(t, "later", "two"))
	held, err := f.lanes.Acquire(t.Context(), "held", kvstore.LeaseInfo{Worker: "test"})
	if err != nil {
		t.Fatal(err)
	}
	// A message waits for "waiting": it was stored while its lane was held,
	// and the worker it was delivered to left it to the holder.
	waiting, err := f.lanes.Acquire(t.Context(), "waiting", kvstore.LeaseInfo{Worker: "test"})
	if err != nil {
		t.Fatal(err)
	}
	pending := f.publish(t, "waiting", "two")
	waitFor(t, "the waiting lane's delivery acked as a follower", func() bool { return w.Stats().FollowerAcks.Load() > 0 })
	if err := waiting.Release(t.Context()); err != nil {
		t.Fatal(err)
	}

	st, err := w.ExpireIdle(t.Context(), cutoff, 100)
	if err != nil {
		t.Fatal(err)
	}
	if st.Expired != 1 || st.Keys != 3 || st.Skipped != 2 {
		t.Fatalf("pass: %+v, want 1 session (2 records, settings) forgotten, 2 skipped", st)
	}
	if n := f.records(t, "idle"); n != 0 {
		t.Fatalf("idle session still has %d records", n)
	}
	if s, err := f.lanes.Settings(t.Context(), "idle"); err != nil || s != nil {
		t.Fatalf("idle session's settings: %q, %v", s, err)
	}
	for key, want := range map[string]int{"held": 1, "later": 2} {
		if n := f.records(t, key); n != want {
			t.Fatalf("%s: %d records, want %d", key, n, want)
		}
	}
	// The waiting message is not lost: the pass took its lane over.
	f.waitFinal(t, "waiting", pending)
	if n := f.records(t, "waiting"); n != 2 {
		t.Fatalf("waiting: %d records, want 2", n)
	}
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}

	again, err := w.ExpireIdle(t.Context(), cutoff, 100)
	if err != nil {
		t.Fatal(err)
	}
	if again.Expired != 0 || again.Scanned != 0 {
		t.Fatalf("second pass with the same cutoff: %+v, want nothing scanned", again)
	}
	// The forgotten session speaks again: a new session.
	f.waitFinal(t, "idle", f.publish(t, "idle", "back"))
	mu.Lock()
	defer mu.Unlock()
	if n := history["idle/back"]; n != 0 {
		t.Fatalf("the forgotten session's next turn saw %d history entries", n)
	}
	if history["later/two"] != 2 {
		t.Fatalf("later's second turn saw %d entries, want 2", history["later/two"])
	}
}

// TestSessionTTLSweep: with Config.SessionTTL the sweep forgets a session
// once it has been idle that long.
func TestSessionTTLSweep(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Second, expireLeaseTTL)
	f.runWorker(t, &echoHandler{}, Config{SweepEvery: 100 * time.Millisecond, SessionTTL: time.Second})
	f.waitFinal(t, "brief", f.publish(t, "brief", "hello"))
	waitFor(t, "the idle session forgotten", func() bool { return f.records(t, "brief") == 0 })
}

// TestSessionTTLValidated: a TTL below the minimum is refused.
func TestSessionTTLValidated(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Second, expireLeaseTTL)
	if _, err := NewWorker(f.js, f.streams, f.lanes, &echoHandler{}, Config{SessionTTL: time.Millisecond}); err == nil {
		t.Fatal("a 1ms session TTL was accepted")
	}
}

// TestExpireScansInBatches: a retention pass reads the lanes bucket in
// batches, not a request per stored message. One request per message (a
// lease, a record, a marker: about five a turn) was slower than a busy
// worker writes once a request took a millisecond: with --session-ttl the
// pass fell behind for good and the bucket grew as without one (lanebench
// soak: 63–85 turns/s on a loaded box, the pass scanned ~100 messages/s
// and forgot one session in five minutes).
func TestExpireScansInBatches(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Second, expireLeaseTTL)
	w := f.runWorker(t, &echoHandler{}, Config{SweepEvery: -1})
	const sessions = 30
	for i := range sessions {
		key := "s" + strconv.Itoa(i)
		f.waitFinal(t, key, f.publish(t, key, "one"))
	}
	cutoff := time.Now()
	// Every request of the JetStream API that reads the bucket's stream
	// by message or creates a consumer on it (but a lane's own next
	// message, one read per lane the pass takes: Lease.Untouched).
	var reads int
	stream := "KV_" + kvstore.DefaultBucket
	st := f.spyPass(t, w, "$JS.API.>", cutoff, func(m *nats.Msg) {
		switch {
		case (m.Subject == "$JS.API.DIRECT.GET."+stream || m.Subject == "$JS.API.STREAM.MSG.GET."+stream) && !strings.Contains(string(m.Data), `"next_by_subj"`),
			strings.HasPrefix(m.Subject, "$JS.API.CONSUMER.CREATE."+stream+"."):
			reads++
		}
	})
	if st.Expired != sessions || st.Scanned < sessions {
		t.Fatalf("pass: %+v, want %d sessions forgotten, at least as many messages scanned", st, sessions)
	}
	if n := reads; n > 4 {
		t.Fatalf("the pass read %d stored messages in %d requests, want a few batches", st.Scanned, n)
	}
	// Its consumers are gone.
	s, err := f.js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := s.Info(t.Context()); err != nil || info.State.Consumers != 0 {
		t.Fatalf("after the pass: %d consumers on %s (%v)", info.State.Consumers, stream, err)
	}
}

// TestExpireWritesPerSessionFixed: forgetting a session takes the same few
// writes however many turns it ran. A fenced purge marker per record made
// a retention pass write once per turn it forgot (and the server expire
// each marker a minute later): the fleet's turns slowed while it ran
// (lanebench soak with --session-ttl: the round with the pass at 0.82× the
// first).
func TestExpireWritesPerSessionFixed(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Second, expireLeaseTTL)
	w := f.runWorker(t, &echoHandler{}, Config{SweepEvery: -1})
	turns := map[string]int{"short": 1, "long": 40}
	for key, n := range turns {
		for i := range n {
			f.waitFinal(t, key, f.publish(t, key, "turn "+strconv.Itoa(i)))
		}
	}
	for key := range turns {
		waitFor(t, key+"'s lane released", func() bool {
			_, held, err := f.lanes.Holder(t.Context(), key)
			return err == nil && !held
		})
	}
	cutoff := time.Now()
	// Every write the pass makes: a publish to a key of the lanes bucket,
	// a purge or a message delete of the JetStream API (what the server
	// delivers to consumers goes to their inboxes, not these subjects).
	nc := natstest.Connect(t, f.url)
	seen := make(chan *nats.Msg, 10_000)
	prefix := "$KV." + kvstore.DefaultBucket + "."
	for _, subj := range []string{prefix + ">", "$JS.API.STREAM.PURGE.>", "$JS.API.STREAM.MSG.DELETE.>"} {
		if _, err := nc.ChanSubscribe(subj, seen); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	st, err := w.ExpireIdle(t.Context(), cutoff, 100)
	if err != nil {
		t.Fatal(err)
	}
	// The pass's requests were answered, so the server has routed them;
	// the flush's answer comes after them, and the client put them in
	// the channel before reading it.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	writes := map[string]int{}
	for len(seen) > 0 {
		m := <-seen
		lane, _, _ := strings.Cut(strings.TrimPrefix(m.Subject, prefix), ".")
		if !strings.HasPrefix(m.Subject, prefix) {
			lane = ""
			for key := range turns {
				if strings.Contains(string(m.Data), "."+key+".") {
					lane = key
				}
			}
		}
		writes[lane]++
	}
	if st.Expired != 2 || st.Keys != 41 {
		t.Fatalf("pass: %+v, want 2 sessions (41 records) forgotten", st)
	}
	for key := range turns {
		if n := f.records(t, key); n != 0 {
			t.Fatalf("%s still has %d records", key, n)
		}
	}
	// A few writes each: the lease taken (a create, or an update of the
	// last release's marker while it lives), renewed and released, two
	// purges of the bucket and one of the step journals.
	if writes["short"] > 8 || writes["long"] > 8 {
		t.Fatalf("writes to forget a session of 1 turn: %d, of 40 turns: %d; want a few, whatever its length", writes["short"], writes["long"])
	}
	t.Logf("writes per forgotten session: %d", writes["long"])
}

// idleSessions runs one turn each of n sessions named prefix0… and waits
// until their lanes are let go and their owners are done (the last step,
// after the release, deletes the processed message), so that a pass finds
// them idle and an owner's last requests do not fall in a pass's count.
func (f *fleet) idleSessions(t *testing.T, prefix string, n int) []string {
	t.Helper()
	var keys []string
	for i := range n {
		key := prefix + strconv.Itoa(i)
		f.waitFinal(t, key, f.publish(t, key, "one"))
		keys = append(keys, key)
	}
	for _, key := range keys {
		waitFor(t, key+"'s lane released", func() bool {
			_, held, err := f.lanes.Holder(t.Context(), key)
			return err == nil && !held
		})
		subj, err := events.InboundSubject(key)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, key+"'s processed message deleted", func() bool {
			_, err := f.streams.Inbound.GetLastMsgForSubject(t.Context(), subj)
			return errors.Is(err, jetstream.ErrMsgNotFound) || f.deleteDenied(t)
		})
	}
	return keys
}

// deleteDenied reports whether the inbound stream refuses deletes (a test's
// fault), so that no processed message is ever deleted.
func (f *fleet) deleteDenied(t *testing.T) bool {
	info, err := f.streams.Inbound.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.Config.DenyDelete
}

// TestExpireIdleBudget: a pass forgets at most its budget and says how far
// behind the cutoff it stopped; the passes after it go on from there until
// every idle session is forgotten, the last reaching the cutoff. (Before,
// a pass went on to the end of the batch in which it reached its limit:
// up to 256 sessions over.)
func TestExpireIdleBudget(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Second, expireLeaseTTL)
	w := f.runWorker(t, &echoHandler{}, Config{SweepEvery: -1})
	const sessions, budget = 7, 3
	keys := f.idleSessions(t, "s", sessions)
	cutoff := time.Now()
	var passes []int
	for total := 0; total < sessions; {
		if len(passes) == sessions {
			t.Fatalf("passes %v: %d of %d sessions forgotten", passes, total, sessions)
		}
		st, err := w.ExpireIdle(t.Context(), cutoff, budget)
		if err != nil {
			t.Fatal(err)
		}
		total += st.Expired
		passes = append(passes, st.Expired)
		switch {
		case st.Expired > budget:
			t.Fatalf("pass %d forgot %d sessions, budget %d", len(passes), st.Expired, budget)
		case total < sessions && st.Lag <= 0:
			t.Fatalf("pass %d stopped on its budget with %d sessions left, lag %v", len(passes), sessions-total, st.Lag)
		case total == sessions && st.Expired < budget && st.Lag != 0:
			t.Fatalf("the last pass reached the cutoff, lag %v", st.Lag)
		}
	}
	if !slices.Equal(passes, []int{3, 3, 1}) {
		t.Fatalf("sessions forgotten per pass: %v, want [3 3 1]", passes)
	}
	for _, key := range keys {
		if n := f.records(t, key); n != 0 {
			t.Fatalf("%s still has %d records", key, n)
		}
	}
	if n, _ := w.Retention(); n != sessions {
		t.Fatalf("Retention counts %d forgotten, want %d", n, sessions)
	}
}

// TestExpireKeepsSessionActiveMidPass: a session that speaks after the
// pass found it idle, before the pass takes its lane, is kept with its
// new turn; the pass forgets the others.
func TestExpireKeepsSessionActiveMidPass(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Second, expireLeaseTTL)
	w := f.runWorker(t, &echoHandler{}, Config{SweepEvery: -1})
	f.idleSessions(t, "s", 3)
	cutoff := time.Now()
	var spoke atomic.Bool
	w.testHookIdle = func(token string) {
		if token == "s1" && !spoke.Swap(true) {
			f.waitFinal(t, "s1", f.publish(t, "s1", "back"))
			waitFor(t, "s1's lane released", func() bool {
				_, held, err := f.lanes.Holder(t.Context(), "s1")
				return err == nil && !held
			})
		}
	}
	st, err := w.ExpireIdle(t.Context(), cutoff, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !spoke.Load() {
		t.Fatal("the pass never found s1 idle")
	}
	if st.Expired != 2 {
		t.Fatalf("pass: %+v, want s0 and s2 forgotten", st)
	}
	for key, want := range map[string]int{"s0": 0, "s1": 2, "s2": 0} {
		if n := f.records(t, key); n != want {
			t.Fatalf("%s: %d records, want %d", key, n, want)
		}
	}
}

// TestRetentionOneWorker: one worker of a fleet runs the retention pass
// (it holds the pass's lease); another takes it over when it gives it up.
func TestRetentionOneWorker(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Second, expireLeaseTTL)
	w1 := f.runWorker(t, &echoHandler{}, Config{SweepEvery: -1, ID: "w1"})
	w2 := f.runWorker(t, &echoHandler{}, Config{SweepEvery: -1, ID: "w2"})
	c1, _ := w1.claimRetention(t.Context(), nil, time.Time{})
	if c1 == nil {
		t.Fatal("w1 could not take the free pass")
	}
	if c2, _ := w2.claimRetention(t.Context(), nil, time.Time{}); c2 != nil {
		t.Fatal("w2 took the pass w1 holds")
	}
	if again, _ := w1.claimRetention(t.Context(), c1, time.Time{}); again != c1 {
		t.Fatal("w1 lost the pass it holds on renewal")
	}
	if err := c1.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if c2, _ := w2.claimRetention(t.Context(), nil, time.Time{}); c2 == nil {
		t.Fatal("w2 could not take the pass w1 gave up")
	}
}

// leaseIndex is an Index that records what it hears and, at Forgotten,
// whether the session's lane was still held (the forget's lease).
type leaseIndex struct {
	f      *fleet
	mu     sync.Mutex
	queued []string // key run
	forgot []string // key held|free
}

func (x *leaseIndex) Touch(Activity) {}

func (x *leaseIndex) Queued(key, run string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.queued = append(x.queued, key+" "+run)
}

func (x *leaseIndex) Forgotten(ctx context.Context, key string) {
	tok, _ := events.KeyToken(key)
	_, held, err := x.f.lanes.Holder(ctx, tok)
	state := "free"
	if err != nil || held {
		state = "held"
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.forgot = append(x.forgot, key+" "+state)
}

// TestForgottenBeforeRelease: the index hears of a forgotten session while
// the forget still holds its lane, so a session that speaks again once the
// lane is free is listed anew and never loses that entry to the forget's
// removal. It failed when Forgotten ran after the lease's release ("s0
// free").
func TestForgottenBeforeRelease(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Second, expireLeaseTTL)
	x := &leaseIndex{f: f}
	w := f.runWorker(t, &echoHandler{}, Config{SweepEvery: -1, Index: x})
	f.idleSessions(t, "s", 2)
	st, err := w.ExpireIdle(t.Context(), time.Now(), 100)
	if err != nil || st.Expired != 2 {
		t.Fatalf("pass: %+v %v", st, err)
	}
	if _, err := w.Forget(t.Context(), "s1"); err != nil { // forgotten already: nothing stored
		t.Fatal(err)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	slices.Sort(x.forgot)
	if want := []string{"s0 held", "s1 free", "s1 held"}; !slices.Equal(x.forgot, want) {
		t.Fatalf("forgotten %q, want %q", x.forgot, want)
	}
}

// TestQueuedOnFirstDelivery: a new session's first message, at its first
// delivery, tells the index its session and run, so a session whose first
// message waits is listed.
func TestQueuedOnFirstDelivery(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Second, expireLeaseTTL)
	x := &leaseIndex{f: f}
	f.runWorker(t, &echoHandler{}, Config{SweepEvery: -1, Index: x})
	var want []string
	for _, key := range []string{"a", "b"} {
		seq := f.publish(t, key, "hi")
		f.waitFinal(t, key, seq)
		want = append(want, key+" "+strconv.FormatUint(seq, 10))
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if !slices.Equal(x.queued, want) {
		t.Fatalf("queued %q, want %q", x.queued, want)
	}
}

// TestExpireSkipsAFailingLane: a lane whose forget keeps failing holds the
// pass's position retention.SkipAfter-1 times; then the pass moves past it
// (logging it once), forgets the sessions after it, and tries it again
// once its wait is over, forgetting it when the fault is gone. The fault
// is real: the inbound stream denies deletes (DenyDelete, which cannot be
// undone), so the processed message a lane left behind cannot go, and the
// operator's fix is a purge of that lane's subject. Before, every pass
// stopped at that lane with an error, forgetting at most one step's
// worth of other sessions: a pass never reached the cutoff again.
func TestExpireSkipsAFailingLane(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Second, expireLeaseTTL)
	var skew atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	var skips atomic.Int64
	f.logHook = zerolog.HookFunc(func(_ *zerolog.Event, level zerolog.Level, msg string) {
		if level == zerolog.WarnLevel && strings.HasPrefix(msg, "retention: forgetting this session keeps failing") {
			skips.Add(1)
		}
	})
	w := f.runWorker(t, &echoHandler{}, Config{SweepEvery: -1, Now: clock})
	cfg, err := f.streams.Inbound.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	sc := cfg.Config
	sc.DenyDelete = true
	if _, err := f.js.UpdateStream(t.Context(), sc); err != nil {
		t.Fatal(err)
	}
	// Every lane now keeps its processed message; all but "stuck" have it
	// purged, as an operator would.
	keys := f.idleSessions(t, "a", 1)
	keys = append(keys, f.idleSessions(t, "stuck", 1)...)
	keys = append(keys, f.idleSessions(t, "b", 7)...)
	purge := func(key string) {
		t.Helper()
		if err := f.streams.Inbound.Purge(t.Context(), jetstream.WithPurgeSubject(events.InboundPrefix+key)); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range keys {
		if key != "stuck0" {
			purge(key)
		}
	}
	cutoff := time.Now()
	for pass := 1; pass <= retention.SkipAfter; pass++ {
		st, err := w.ExpireIdle(t.Context(), cutoff, 100)
		if st.Failed != 1 {
			t.Fatalf("pass %d: %+v (%v), want stuck0's forget failed", pass, st, err)
		}
		if pass < retention.SkipAfter {
			if err == nil || st.Lag == 0 || st.Retrying != 0 {
				t.Fatalf("pass %d: %+v, %v; want it held at stuck0 with its error", pass, st, err)
			}
			continue
		}
		if err != nil || st.Lag != 0 || st.Retrying != 1 {
			t.Fatalf("pass %d: %+v, %v; want it past stuck0 to the cutoff, stuck0 on the retry list", pass, st, err)
		}
	}
	if n := skips.Load(); n != 1 {
		t.Fatalf("%d skip warnings, want 1", n)
	}
	for _, key := range keys {
		want := 0
		if key == "stuck0" {
			want = 1
		}
		if n := f.records(t, key); n != want {
			t.Fatalf("%s: %d records, want %d", key, n, want)
		}
	}
	// Sessions idle after it go in one pass.
	later := f.idleSessions(t, "c", 6)
	for _, key := range later {
		purge(key)
	}
	st, err := w.ExpireIdle(t.Context(), time.Now(), 100)
	if err != nil || st.Expired != len(later) || st.Failed != 0 || st.Retrying != 1 {
		t.Fatalf("pass after the skip: %+v, %v; want %d forgotten, stuck0 not tried before its wait", st, err, len(later))
	}
	// Still failing when its wait is over: it waits longer.
	skew.Add(int64(retention.RetryAfter(retention.SkipAfter)))
	st, err = w.ExpireIdle(t.Context(), time.Now(), 100)
	if err != nil || st.Failed != 1 || st.Retrying != 1 {
		t.Fatalf("retry: %+v, %v; want stuck0 tried, failing, still listed", st, err)
	}
	if st, err = w.ExpireIdle(t.Context(), time.Now(), 100); err != nil || st.Failed != 0 {
		t.Fatalf("pass before the longer wait: %+v, %v; want stuck0 not tried", st, err)
	}
	// Mended: the next retry forgets it.
	purge("stuck0")
	skew.Add(int64(retention.RetryAfter(retention.SkipAfter + 1)))
	st, err = w.ExpireIdle(t.Context(), time.Now(), 100)
	if err != nil || st.Expired != 1 || st.Retrying != 0 {
		t.Fatalf("retry after the fix: %+v, %v; want stuck0 forgotten, the list empty", st, err)
	}
	if n := f.records(t, "stuck0"); n != 0 {
		t.Fatalf("stuck0: %d records after its retry", n)
	}
}

// TestExpireRetryListCraftedTokens: tokens read back from a retry list
// that no worker wrote (a wildcard, a subject with dots) are not lanes of
// ours: the pass drops them without error instead of using them in a
// subject filter.
func TestExpireRetryListCraftedTokens(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Second, expireLeaseTTL)
	w := f.runWorker(t, &echoHandler{}, Config{SweepEvery: -1})
	crafted := []kvstore.Retry{{Token: "*", Tries: retention.SkipAfter}, {Token: "a.>", Tries: retention.SkipAfter}}
	if err := f.lanes.SetRetentionRetries(t.Context(), crafted, 0); err != nil {
		t.Fatal(err)
	}
	st, err := w.ExpireIdle(t.Context(), time.Now(), 100)
	if err != nil || st.Failed != 0 || st.Retrying != 0 {
		t.Fatalf("pass: %+v, %v; want the crafted entries dropped", st, err)
	}
	if rs, _, err := f.lanes.RetentionRetries(t.Context()); err != nil || len(rs) != 0 {
		t.Fatalf("retry list %+v, %v; want it empty", rs, err)
	}
}

// TestExpireStepGrowsBehind: a pass far behind the cutoff looks at more
// lanes at once than one that keeps up (retention.Step), and still
// forgets each idle session once. Four at a time whatever the lag kept the
// soak's pass behind for good on a loaded box (lag 49 s → 102 s over five
// rounds): a step's time is mostly its lanes' round trips.
func TestExpireStepGrowsBehind(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Second, expireLeaseTTL)
	w := f.runWorker(t, &echoHandler{}, Config{SweepEvery: -1})
	const sessions = 2 * retention.MaxStepLanes
	keys := f.idleSessions(t, "s", sessions)
	// Every session expired more than the whole ladder of steps ago.
	cutoff := time.Now().Add(4 * retention.StepBehind)
	st, err := w.ExpireIdle(t.Context(), cutoff, 1000)
	if err != nil {
		t.Fatal(err)
	}
	// (A step also ends where a read of the bucket does.)
	if st.Expired != sessions || st.Step <= retention.StepLanes || st.Step > retention.MaxStepLanes {
		t.Fatalf("pass: %+v, want %d sessions forgotten, more than %d lanes a step once behind, at most %d", st, sessions, retention.StepLanes, retention.MaxStepLanes)
	}
	if steps, lanes, busy := w.RetentionSteps(); steps < 2 || lanes != sessions || busy <= 0 {
		t.Fatalf("RetentionSteps: %d steps, %d lanes, %v; want %d lanes in a few steps", steps, lanes, busy, sessions)
	}
	for _, key := range keys {
		if n := f.records(t, key); n != 0 {
			t.Fatalf("%s still has %d records", key, n)
		}
	}
}

// TestExpireRequestsPerSession: forgetting an idle session takes at most
// 11 requests of the store, the scan's shared among the sessions (the
// fleet's session index adds one). A lane the pass takes is checked by one
// read of its next message since it was looked at (Lease.Untouched)
// instead of reading its keys and newest record again: 11.45 requests a
// session here before, 10.45 after.
func TestExpireRequestsPerSession(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Second, expireLeaseTTL)
	w := f.runWorker(t, &echoHandler{}, Config{SweepEvery: -1})
	const sessions = 20
	keys := f.idleSessions(t, "s", sessions)
	// The release markers gone from the store first: the pass takes a lane
	// whose marker is still there, but older than this process remembers
	// its release, with a failed create, a read and a second write. Which
	// lanes those are depends on the machine's pace (a loaded one gave
	// 11.25 requests a session), not on the pass.
	// (Read from the stream: the bucket's Get reads a marker as not found.)
	bucket, err := f.js.Stream(t.Context(), "KV_"+kvstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		waitFor(t, key+"'s release marker expired", func() bool {
			_, err := bucket.GetLastMsgForSubject(t.Context(), "$KV."+kvstore.DefaultBucket+"."+key+".lease")
			return errors.Is(err, jetstream.ErrMsgNotFound)
		})
	}
	cutoff := time.Now()
	// Every request the worker's connection sends (what the server sends
	// back, and what it delivers to the scan's consumer, has no inbox to
	// answer).
	reqs := map[string]int{}
	st := f.spyPass(t, w, ">", cutoff, func(m *nats.Msg) {
		if strings.HasPrefix(m.Reply, "_INBOX.") && !strings.HasPrefix(m.Subject, "_INBOX.") {
			reqs[m.Subject]++
		}
	})
	if st.Expired != sessions {
		t.Fatalf("pass: %+v, want %d sessions forgotten", st, sessions)
	}
	n := 0
	for _, c := range reqs {
		n += c
	}
	if per := float64(n) / sessions; per > 11 {
		t.Fatalf("%.2f requests per forgotten session, want at most 11: %v", per, reqs)
	}
	t.Logf("%.2f requests per forgotten session", float64(n)/sessions)
}

// spyPass runs a retention pass of w up to cutoff while a connection of
// its own sees every message on subject, and hands each to seen once the
// pass is over. The pass's requests were answered, so the server routed
// them before the flush's answer, and the client put them in the channel
// before reading that.
func (f *fleet) spyPass(t *testing.T, w *Worker, subject string, cutoff time.Time, seen func(*nats.Msg)) ExpireStats {
	t.Helper()
	nc := natstest.Connect(t, f.url)
	ch := make(chan *nats.Msg, 100_000)
	sub, err := nc.ChanSubscribe(subject, ch)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	st, err := w.ExpireIdle(t.Context(), cutoff, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	for len(ch) > 0 {
		seen(<-ch)
	}
	return st
}

// TestExpireAfterAnOperatorsForget: an operator's forget of a session
// between the pass's read of it and its lease (which Untouched cannot
// see: a purge leaves no marker) is the operator's: the pass counts the
// others only, and takes the session off the index once. The old pass
// counted it forgotten twice.
func TestExpireAfterAnOperatorsForget(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Second, expireLeaseTTL)
	x := &leaseIndex{f: f}
	w := f.runWorker(t, &echoHandler{}, Config{SweepEvery: -1, Index: x})
	f.idleSessions(t, "s", 3)
	cutoff := time.Now()
	var forgot atomic.Bool
	var n int
	w.testHookIdle = func(token string) {
		if token == "s1" && !forgot.Swap(true) {
			var err error
			if n, err = w.Forget(t.Context(), "s1"); err != nil {
				t.Error(err)
			}
		}
	}
	st, err := w.ExpireIdle(t.Context(), cutoff, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !forgot.Load() || n == 0 {
		t.Fatalf("the operator's forget: %d keys (ran: %v)", n, forgot.Load())
	}
	if st.Expired != 2 {
		t.Fatalf("pass: %+v, want s0 and s2 forgotten by it", st)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if got := strings.Join(x.forgot, ","); strings.Count(got, "s1") != 1 {
		t.Fatalf("index told of forgets %q, want s1 once", got)
	}
	for _, key := range []string{"s0", "s1", "s2"} {
		if n := f.records(t, key); n != 0 {
			t.Fatalf("%s: %d records", key, n)
		}
	}
}
