package lanes

import (
	"context"
	"fmt"
	"slices"
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
	"github.com/lanefleet/lanefleet/lanes/internal/slots"
)

// fairWorker runs a worker on its own connection and returns it with the
// connection (closing it without shutting the worker down is how a test kills
// one) and the function that shuts it down.
func (f *fleet) fairWorker(t *testing.T, h Handler, cfg Config) (*Worker, *nats.Conn, func()) {
	t.Helper()
	nc := natstest.Connect(t, f.url)
	w := f.newWorker(t, nc, h, cfg, zerolog.ErrorLevel)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return w, nc, stop
}

// orderHandler records every turn it runs, in the order it runs them, and
// can hold one message's turn until told.
type orderHandler struct {
	echoHandler
	mu    sync.Mutex
	order []string // texts in handling order, across lanes
	runs  map[string]int
}

func newOrderHandler(hook func(*Turn) error) *orderHandler {
	h := &orderHandler{runs: map[string]int{}}
	h.hook = func(t *Turn) error {
		if hook != nil {
			if err := hook(t); err != nil {
				return err
			}
		}
		h.mu.Lock()
		h.order = append(h.order, t.Inbound.Text)
		h.runs[t.Inbound.Text]++
		h.mu.Unlock()
		return nil
	}
	return h
}

func (h *orderHandler) ran() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.order)
}

// TestLaneKeepsItsSlotWhenNobodyWaits: with no other lane waiting, a lane
// drains all its messages under one lease; nothing yields.
func TestLaneKeepsItsSlotWhenNobodyWaits(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Minute, 5*time.Second)
	started, release := make(chan struct{}), make(chan struct{})
	h := blockingHandler(started, release)
	w, _, _ := f.fairWorker(t, h, Config{Concurrency: 1})
	f.publish(t, "alone", "hold")
	<-started
	var last uint64
	for i := range 5 {
		last = f.publish(t, "alone", fmt.Sprint("m", i))
	}
	close(release)
	f.waitFinal(t, "alone", last)
	if y, a := w.Stats().Yields.Load(), w.Stats().Acquired.Load(); y != 0 || a != 1 {
		t.Fatalf("yields = %d, acquired = %d: a lane nobody waits behind keeps its slot", y, a)
	}
}

// TestLaneYieldsToWaitingLane: one slot, a busy lane with messages queued
// and a quiet lane waiting behind it: after its turn the busy lane gives
// the slot to the quiet one, and then continues in order; every message
// runs once.
func TestLaneYieldsToWaitingLane(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Minute, 5*time.Second)
	inBusy0, quietWaits := make(chan struct{}), make(chan struct{})
	h := newOrderHandler(func(t *Turn) error {
		if t.Inbound.Text == "busy-0" {
			// Hold the first turn until the quiet lane waits for the slot.
			close(inBusy0)
			<-quietWaits
		}
		return nil
	})
	w, _, _ := f.fairWorker(t, h, Config{Concurrency: 1})
	// The busy lane's later messages go out once its owner holds the lane
	// (they are its followers, acked without a slot), so the only delivery
	// that can wait for the slot is the quiet lane's.
	busy := []uint64{f.publish(t, "busy", "busy-0")}
	<-inBusy0
	for i := 1; i < 6; i++ {
		busy = append(busy, f.publish(t, "busy", fmt.Sprint("busy-", i)))
	}
	quiet := f.publish(t, "quiet", "quiet")
	waitFor(t, "the quiet lane in line", func() bool { return w.Waiting() == 1 })
	close(quietWaits)
	f.waitFinal(t, "quiet", quiet)
	f.waitFinal(t, "busy", busy[len(busy)-1])
	order := h.ran()
	q := slices.Index(order, "quiet")
	var busyOrder []string
	for _, s := range order {
		if s != "quiet" {
			busyOrder = append(busyOrder, s)
		}
	}
	want := []string{"busy-0", "busy-1", "busy-2", "busy-3", "busy-4", "busy-5"}
	if !slices.Equal(busyOrder, want) || len(order) != 7 {
		t.Fatalf("turns ran %v: want the busy lane's in order, each once, and quiet once", order)
	}
	// A waiting delivery is handed back after a second and may be in
	// flight at one turn boundary; it is back well before the last one.
	if q < 1 || q >= 6 {
		t.Fatalf("quiet ran at %d of %v: want it between the busy lane's turns", q, order)
	}
	if w.Stats().Yields.Load() == 0 {
		t.Fatal("no yield counted")
	}
}

// TestFairLanesNothingLostOrDoubled: many lanes over few slots on two
// workers, every lane sending more than its budget: lanes yield, and still
// every lane's turns run once each, in order, and no lane is left stuck.
func TestFairLanesNothingLostOrDoubled(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 30*time.Second, 5*time.Second)
	clock := newTurnClock()
	h := newOrderHandler(func(*Turn) error {
		clock.turn() // a turn takes a moment, so lanes wait
		return nil
	})
	w1, _, _ := f.fairWorker(t, h, Config{Concurrency: 2, Now: clock.now})
	w2, _, _ := f.fairWorker(t, h, Config{Concurrency: 2, Now: clock.now})
	const lanes, msgs = 12, 8
	last := map[string]uint64{}
	for i := range msgs {
		for l := range lanes {
			k := fmt.Sprint("lane", l)
			last[k] = f.publish(t, k, fmt.Sprintf("%s-%02d", k, i))
		}
	}
	for k, seq := range last {
		if ev := f.waitFinal(t, k, seq); ev.Data.Result.Payloads[0].Text != fmt.Sprintf("ok %s-%02d", k, msgs-1) {
			t.Fatalf("final of %s = %+v", k, ev.Data.Result)
		}
	}
	for l := range lanes {
		k := fmt.Sprint("lane", l)
		tok, _ := events.KeyToken(k)
		recs, err := f.lanes.Records(t.Context(), tok)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != msgs {
			t.Fatalf("%s has %d records, want %d", k, len(recs), msgs)
		}
		for i, r := range recs {
			if got, want := r.Entries[0].Message.Content.Text(), fmt.Sprintf("%s-%02d", k, i); got != want {
				t.Fatalf("%s record %d = %q, want %q", k, i, got, want)
			}
		}
	}
	h.mu.Lock()
	for text, n := range h.runs {
		if n != 1 {
			t.Errorf("%s ran %d times", text, n)
		}
	}
	h.mu.Unlock()
	if y := w1.Stats().Yields.Load() + w2.Stats().Yields.Load(); y == 0 {
		t.Fatal("no lane yielded: the test did not exercise fairness")
	}
}

// TestYieldedLaneSurvivesItsWorker: a worker dies (its connection closes)
// while lanes it yielded wait for their triggers; the triggers come back
// after AckWait and another worker drains every lane, each message once.
func TestYieldedLaneSurvivesItsWorker(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 2*time.Second, 2*time.Second)
	clock := newTurnClock()
	var victim *Worker
	var die sync.Once
	var victimConn *nats.Conn
	h := newOrderHandler(func(t *Turn) error {
		if victim != nil && t.Worker == victim.ID() && victim.Stats().Yields.Load() > 0 {
			// The victim dies mid-turn after a yield: this turn never
			// commits, its lanes' triggers are left un-acked.
			die.Do(func() { victimConn.Close() })
			return fmt.Errorf("worker died")
		}
		clock.turn()
		return nil
	})
	wrapped, open := gated(h)
	victim, victimConn, _ = f.fairWorker(t, wrapped, Config{Concurrency: 1, RetryDelay: time.Hour, ShutdownGrace: 100 * time.Millisecond, Now: clock.now})
	const lanes, msgs = 4, 5
	last := map[string]uint64{}
	for i := range msgs {
		for l := range lanes {
			k := fmt.Sprint("v", l)
			last[k] = f.publish(t, k, fmt.Sprintf("%s-%02d", k, i))
		}
	}
	open()
	waitFor(t, "the victim's death", func() bool { return victimConn.IsClosed() })
	f.fairWorker(t, h, Config{Concurrency: 2, Now: clock.now})
	for k, seq := range last {
		f.waitFinal(t, k, seq)
	}
	for l := range lanes {
		k := fmt.Sprint("v", l)
		tok, _ := events.KeyToken(k)
		recs, err := f.lanes.Records(t.Context(), tok)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range recs {
			got = append(got, r.Entries[0].Message.Content.Text())
		}
		var want []string
		for i := range msgs {
			want = append(want, fmt.Sprintf("%s-%02d", k, i))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s committed %v, want %v", k, got, want)
		}
	}
}

// TestShouldYield: an owner yields only with a trigger, after at least one
// turn, when a lane has waited at least as long as the owner's last turn
// took or is of a tenant under its share while the owner's is not, and
// once its turn or time budget is used.
func TestShouldYield(t *testing.T) {
	trigger := jetstream.Msg(nil)
	var msg jetstream.Msg = &fakeMsg{}
	cases := []struct {
		name    string
		cfg     Config
		waiting bool
		trigger jetstream.Msg
		turns   int
		held    time.Duration
		want    bool
		late    bool // the waiting lane has waited less than the last turn took
		tenants bool // the owner's lane is tenant noisy's, the waiting one tenant quiet's
	}{
		{"budget used, a lane waits", Config{}, true, msg, 1, 0, true, false, false},
		{"nobody waits", Config{}, false, msg, 5, time.Hour, false, false, false},
		{"no turn yet", Config{LaneTimeBudget: time.Millisecond}, true, msg, 0, time.Hour, false, false, false},
		{"no trigger (swept lane)", Config{}, true, trigger, 3, 0, false, false, false},
		{"turn budget not used", Config{LaneTurnBudget: 3}, true, msg, 2, 0, false, false, false},
		{"time budget used first", Config{LaneTurnBudget: 3, LaneTimeBudget: time.Second}, true, msg, 1, 2 * time.Second, true, false, false},
		{"fairness off", Config{LaneTurnBudget: -1}, true, msg, 9, time.Hour, false, false, false},
		{"the waiting lane came during the last turn", Config{}, true, msg, 1, time.Second, false, true, false},
		// Before, it waited for the owner's turn to pass: a quiet
		// tenant's message waited a whole turn of the noisy one's.
		{"a tenant under its share waits, the owner's is over", Config{}, true, msg, 1, 0, true, true, true},
		{"under its share, but the turn budget not used", Config{LaneTurnBudget: 3}, true, msg, 1, 0, false, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			c.cfg.Now = func() time.Time { return now }
			owner, other := "owner", "other"
			if c.tenants {
				c.cfg.Tenant = func(key string) string { t, _, _ := strings.Cut(key, ":"); return t }
				owner, other = keyToken(t, "noisy:1"), keyToken(t, "quiet:1")
			}
			cfg := c.cfg.withDefaults()
			w := &Worker{cfg: cfg, sched: slots.New(1, cfg.MaxInflightBytes, cfg.shares())}
			last := 10 * time.Second // the owner's last turn
			if c.waiting {
				w.sched.Take(owner, 0, now)
				began := now.Add(-last - time.Second)
				if c.late {
					began = now.Add(-last / 2)
				}
				w.sched.Wait(other, 0, began, false)
			}
			if got := w.shouldYield(owner, c.turns, now.Add(-c.held), last, c.trigger); got != c.want {
				t.Fatalf("shouldYield = %v, want %v", got, c.want)
			}
		})
	}
}

// turnClock is the workers' clock (Config.Now) in tests whose turns must
// take a moment so that lanes wait for slots: each turn moves it on
// instead of sleeping.
type turnClock struct{ skew atomic.Int64 }

func newTurnClock() *turnClock { return &turnClock{} }

// now is the wall clock, moved on by every turn so far.
func (c *turnClock) now() time.Time { return time.Now().Add(time.Duration(c.skew.Load())) }

// turn moves the clock on by what a turn takes (2 ms).
func (c *turnClock) turn() { c.skew.Add(int64(2 * time.Millisecond)) }

// fakeMsg stands for a trigger delivery where only its presence matters.
type fakeMsg struct{ jetstream.Msg }

// gated holds every turn of h until open is called: a handler that reads
// the worker it runs on waits until the test has it.
func gated(h Handler) (wrapped Handler, open func()) {
	ready := make(chan struct{})
	return HandlerFunc(func(ctx context.Context, t *Turn) (*Outcome, error) {
		<-ready
		return h.HandleTurn(ctx, t)
	}), sync.OnceFunc(func() { close(ready) })
}

// TestByteBudgetBoundsPayloadsInFlight: a worker with slots to spare but a
// byte budget of two and a half large messages runs two such lanes at once;
// the others wait in line for bytes, not for slots, and run once bytes come
// back: every message runs once, and never more than two at a time. A
// small message waits behind them (first come, first served).
func TestByteBudgetBoundsPayloadsInFlight(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 30*time.Second, 5*time.Second)
	big := strings.Repeat("x", 64<<10)
	var (
		mu            sync.Mutex
		running, most int
		release       = make(chan struct{})
		ran           = map[string]int{}
	)
	h := &echoHandler{hook: func(t *Turn) error {
		mu.Lock()
		running++
		most = max(most, running)
		ran[t.SessionKey]++
		mu.Unlock()
		<-release
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	}}
	w, _, _ := f.fairWorker(t, h, Config{Concurrency: 8, MaxInflightBytes: 5 * (64 << 10) / 2})
	last := map[string]uint64{}
	for i := range 5 {
		k := fmt.Sprint("big", i)
		last[k] = f.publish(t, k, big)
	}
	waitFor(t, "two lanes running and the rest waiting for bytes", func() bool { return w.Active() == 2 && w.Waiting() >= 1 })
	last["small"] = f.publish(t, "small", "hi")
	waitFor(t, "the small lane waiting behind them", func() bool { return w.Waiting() >= 2 })
	if a := w.Active(); a != 2 {
		t.Fatalf("%d lanes running with slots to spare, want the byte budget's 2", a)
	}
	close(release)
	for k, seq := range last {
		f.waitFinal(t, k, seq)
	}
	// A lane's slot and bytes come back when its owner lets the lane go,
	// just after its final event.
	waitFor(t, "every slot and byte back", func() bool { return w.Active() == 0 && w.sched.UsedBytes() == 0 })
	mu.Lock()
	defer mu.Unlock()
	if most > 2 {
		t.Fatalf("%d large payloads in flight at once, want at most 2", most)
	}
	for k := range last {
		if ran[k] != 1 {
			t.Errorf("%s ran %d times", k, ran[k])
		}
	}
	if w.Stats().Waited.Load() == 0 {
		t.Fatal("no delivery waited for bytes")
	}
}

// TestByteBudgetChargesFollowUps: a large message queued behind a small
// one on the same lane is charged too. Its owner, admitted for the small
// trigger, lets the lane go while the budget cannot take the large one,
// and runs it once the bytes in flight are back; every message runs once,
// in order.
func TestByteBudgetChargesFollowUps(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 30*time.Second, 5*time.Second)
	big := strings.Repeat("x", 64<<10)
	var (
		mu      sync.Mutex
		bigRan  bool
		order   []string
		started = make(chan struct{})
		release = make(chan struct{})
		// bigStored holds the small turn until the large follow-up is
		// stored, so its owner finds it next (not a later owner).
		bigStored = make(chan struct{})
	)
	h := &echoHandler{hook: func(t *Turn) error {
		if t.SessionKey == "follow" && t.Inbound.Text == "small" {
			<-bigStored
		}
		mu.Lock()
		order = append(order, t.SessionKey+":"+t.Inbound.Text[:min(5, len(t.Inbound.Text))])
		if t.SessionKey == "follow" && t.Inbound.Text == big {
			bigRan = true
		}
		mu.Unlock()
		if t.SessionKey == "holder" {
			close(started)
			<-release
		}
		return nil
	}}
	// Room for one large payload, not two.
	w, _, _ := f.fairWorker(t, h, Config{Concurrency: 8, MaxInflightBytes: 3 * (64 << 10) / 2})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // a failure must not leave the worker's stop waiting on the holder
	f.publish(t, "holder", big)
	<-started
	small := f.publish(t, "follow", "small")
	last := f.publish(t, "follow", big)
	close(bigStored)
	f.waitFinal(t, "follow", small)
	waitFor(t, "the follow-up let go over the budget", func() bool { return w.Stats().OverBudget.Load() >= 1 })
	mu.Lock()
	ran := bigRan
	mu.Unlock()
	if ran {
		t.Fatal("a large follow-up ran while another large payload held the budget")
	}
	free()
	f.waitFinal(t, "follow", last)
	waitFor(t, "every slot and byte back", func() bool { return w.Active() == 0 && w.sched.UsedBytes() == 0 })
	mu.Lock()
	defer mu.Unlock()
	want := []string{"holder:xxxxx", "follow:small", "follow:xxxxx"}
	if !slices.Equal(order, want) {
		t.Fatalf("turns ran %q, want %q", order, want)
	}
}

// keyToken is a session key's lane token.
func keyToken(t *testing.T, key string) string {
	t.Helper()
	tok, err := events.KeyToken(key)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestQuietTenantStartsBeforeTheFlood: a quiet tenant ran two sessions a
// moment ago; a noisy tenant's six sessions, two messages each, arrive
// and their turns hold the slots they get, the rest of its backlog in
// line. The quiet sessions' next messages start at once, in the slots kept
// free for their tenant, while every noisy turn is still held and its
// backlog waits; then the backlog drains, each message once and in order.
// (Before, the noisy lanes took every free slot as they arrived, and the
// quiet messages waited for a noisy turn to end.)
func TestQuietTenantStartsBeforeTheFlood(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Minute, 5*time.Second)
	// The scheduler's clock stands still: what the quiet tenant used a
	// moment ago does not grow stale however slow the machine is.
	frozen := time.Now()
	release := make(chan struct{})
	var noisyStarted atomic.Int32
	quietRan := make(chan string, 4)
	// The quiet tenant's first two turns hold their slots until both
	// run, so that it used two at once however the machine schedules
	// their deliveries (one lane let go before the other arrived would
	// leave it one slot kept).
	bothQuiet := make(chan struct{})
	h := newOrderHandler(func(t *Turn) error {
		if strings.HasPrefix(t.SessionKey, "noisy:") {
			noisyStarted.Add(1)
			<-release
			return nil
		}
		quietRan <- t.Inbound.Text
		<-bothQuiet
		return nil
	})
	tenant := func(key string) string { t, _, _ := strings.Cut(key, ":"); return t }
	w, _, _ := f.fairWorker(t, h, Config{Concurrency: 4, Tenant: tenant, Now: func() time.Time { return frozen }})
	open := sync.OnceFunc(func() { close(release) })
	t.Cleanup(open) // before the worker's stop: a failed test's held turns end
	openQuiet := sync.OnceFunc(func() { close(bothQuiet) })
	t.Cleanup(openQuiet)
	quiet := []string{"quiet:a", "quiet:b"}
	awaitQuiet := func(n int) {
		t.Helper()
		for i := range n {
			select {
			case <-quietRan:
			case <-time.After(time.Minute):
				t.Fatalf("%d of the quiet tenant's %d messages started; noisy turns running %d, lanes in line %d", i, n, noisyStarted.Load(), w.Waiting())
			}
		}
	}
	for _, k := range quiet {
		f.publish(t, k, k+" 1")
	}
	awaitQuiet(2)
	openQuiet()
	waitFor(t, "the quiet lanes let go", func() bool { return w.Active() == 0 && w.Held() == 0 })

	last := map[string]uint64{}
	for i := range 6 {
		k := fmt.Sprint("noisy:", i)
		f.publish(t, k, k+" 1")
		last[k] = f.publish(t, k, k+" 2")
	}
	waitFor(t, "noisy turns holding slots and noisy lanes in line", func() bool { return noisyStarted.Load() >= 2 && w.Waiting() > 0 })
	for _, k := range quiet {
		last[k] = f.publish(t, k, k+" 2")
	}
	awaitQuiet(2)
	if n := noisyStarted.Load(); n != 2 {
		t.Fatalf("%d noisy turns started; want 2, its share of the four slots (the quiet tenant's are kept for it)", n)
	}
	open()
	for k, seq := range last {
		f.waitFinal(t, k, seq)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range 6 {
		k := fmt.Sprint("noisy:", i)
		if a, b := slices.Index(h.order, k+" 1"), slices.Index(h.order, k+" 2"); a < 0 || b < a {
			t.Errorf("%s ran %v", k, h.order)
		}
	}
	for text, n := range h.runs {
		if n != 1 {
			t.Errorf("%s ran %d times", text, n)
		}
	}
}

// metaMsg is a delivery whose only part that matters is its metadata.
type metaMsg struct {
	jetstream.Msg
	md jetstream.MsgMetadata
}

func (m *metaMsg) Metadata() (*jetstream.MsgMetadata, error) { return &m.md, nil }

// TestBusyDelay: a delivery that finds no room comes back after 250 ms
// the first time, twice as late each time after, up to 4 s and half the
// AckWait. (Before, every one came back after 250 ms: a thousand lanes
// the slots and the line could not hold came back four thousand times a
// second, ahead of every new session's message.)
func TestBusyDelay(t *testing.T) {
	t.Parallel()
	cases := []struct {
		delivered uint64
		ackWait   time.Duration
		want      time.Duration
	}{
		{1, time.Minute, 250 * time.Millisecond},
		{2, time.Minute, 500 * time.Millisecond},
		{4, time.Minute, 2 * time.Second},
		{5, time.Minute, 4 * time.Second},
		{1000, time.Minute, 4 * time.Second}, // no overflow
		{5, 3 * time.Second, 1500 * time.Millisecond},
		{5, 100 * time.Millisecond, 250 * time.Millisecond},
	}
	for _, c := range cases {
		w := &Worker{streams: &Streams{cfg: StreamConfig{AckWait: c.ackWait}}}
		msg := &metaMsg{md: jetstream.MsgMetadata{NumDelivered: c.delivered}}
		if got := w.busyDelay(msg); got != c.want {
			t.Errorf("delivery %d, AckWait %v: back after %v, want %v", c.delivered, c.ackWait, got, c.want)
		}
	}
}
