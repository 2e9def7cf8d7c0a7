package sessionindex_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/sessionindex"
)

type bundle struct {
	ctx context.Context
	js  jetstream.JetStream
	x   *sessionindex.Index
	log *syncBuffer
}

// syncBuffer is a log the test reads while the index writes it.
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

func setup(t *testing.T) *bundle {
	t.Helper()
	srv := natstest.Start(t)
	js := natstest.JetStream(t, srv.URL)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	log := &syncBuffer{}
	x, created, err := sessionindex.Ensure(ctx, js, sessionindex.Config{Logger: zerolog.New(log)})
	if err != nil || !created {
		t.Fatalf("ensure: created %v, %v", created, err)
	}
	t.Cleanup(func() { _ = x.Close() })
	return &bundle{ctx: ctx, js: js, x: x, log: log}
}

// put writes key's entry and waits for it to be stored.
func (b *bundle) put(t *testing.T, key, run string) {
	t.Helper()
	subj, err := sessionindex.Subject(key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.js.Publish(b.ctx, subj, []byte(`{"run":"`+run+`"}`)); err != nil {
		t.Fatal(err)
	}
}

// pages follows Newest's pages from q and returns the keys, page by page.
func (b *bundle) pages(t *testing.T, q sessionindex.Query, between func()) [][]string {
	t.Helper()
	var out [][]string
	for {
		p, err := b.x.Newest(b.ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, e := range p.Entries {
			keys = append(keys, e.Key)
		}
		out = append(out, keys)
		if p.Next == 0 {
			return out
		}
		if len(out) > 1000 {
			t.Fatal("pages do not end")
		}
		q.Before = p.Next
		if between != nil {
			between()
		}
	}
}

// TestNewestPages: entries list newest first, a newer entry of a session
// replacing its older one; pages followed by Next list each session once;
// a group's filter lists that group only (read whole and filtered here in
// small windows, by the server in large ones); Count counts.
func TestNewestPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var want []string // newest first
	for i := range 300 {
		key := fmt.Sprintf("acme:s%03d", i)
		if i%3 == 0 {
			key = fmt.Sprintf("beta:s%03d", i)
		}
		b.put(t, key, fmt.Sprint(i+1))
		want = append([]string{key}, want...)
	}
	// Older sessions active again move to the top.
	for _, key := range []string{"acme:s001", "beta:s000", "acme:s299"} {
		b.put(t, key, "1000")
		want = append([]string{key}, slices.DeleteFunc(want, func(k string) bool { return k == key })...)
	}
	cases := []struct {
		name   string
		filter string
		limit  int
		keep   func(string) bool
	}{
		{"all, pages of 7", "", 7, nil},
		{"all, one page", "", 1000, nil},
		{"a group", "acme:", 10, func(k string) bool { return strings.HasPrefix(k, "acme:") }},
		{"another", "beta:", 100, func(k string) bool { return strings.HasPrefix(k, "beta:") }},
	}
	for _, tc := range cases {
		filter, exact := sessionindex.Filter(tc.filter)
		if !exact {
			t.Fatalf("%q: not exact", tc.filter)
		}
		pages := b.pages(t, sessionindex.Query{Filter: filter, Limit: tc.limit}, nil)
		var got []string
		for _, p := range pages {
			if len(p) > tc.limit {
				t.Fatalf("%s: a page of %d", tc.name, len(p))
			}
			got = append(got, p...)
		}
		w := want
		if tc.keep != nil {
			w = slices.DeleteFunc(slices.Clone(want), func(k string) bool { return !tc.keep(k) })
		}
		if !slices.Equal(got, w) {
			t.Errorf("%s:\n got %v\nwant %v", tc.name, got, w)
		}
		if n, err := b.x.Count(b.ctx); err != nil || n != len(want) {
			t.Errorf("%s: counted %d, %v; want %d", tc.name, n, err, len(want))
		}
	}
}

// TestPagingWhileActive: while a listing is paged through, sessions turn
// active again (from pages read and pages not read yet): no session is
// listed twice, and every session that stayed idle is listed once.
func TestPagingWhileActive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 200
	for i := range n {
		b.put(t, fmt.Sprintf("s%03d", i), fmt.Sprint(i+1))
	}
	touched := map[string]bool{}
	next := 0
	pages := b.pages(t, sessionindex.Query{Limit: 9}, func() {
		// One session of a page read, one not read yet.
		for _, key := range []string{fmt.Sprintf("s%03d", n-1-next), fmt.Sprintf("s%03d", next)} {
			b.put(t, key, "9999")
			touched[key] = true
		}
		next += 7
	})
	seen := map[string]int{}
	for _, p := range pages {
		for _, k := range p {
			seen[k]++
		}
	}
	for i := range n {
		key := fmt.Sprintf("s%03d", i)
		switch c := seen[key]; {
		case c > 1:
			t.Errorf("%s listed %d times", key, c)
		case c == 0 && !touched[key]:
			t.Errorf("%s, idle all along, is not listed", key)
		}
	}
}

// TestMalformedSkipped: a message on the index's subjects that is not an
// entry (a token that is no lane's, a group that is not its key's, data
// that is not a record, a run that is not a sequence) is skipped with a
// log line; the entries around it are listed.
func TestMalformedSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.put(t, "good:1", "1")
	for _, m := range []struct{ subj, data string }{
		{sessionindex.Prefix + "-.=bad", `{"run":"2"}`},          // not a token's encoding
		{sessionindex.Prefix + "-.=Z29vZDoy", `{"run":"2"}`},     // good:2 in the wrong group
		{sessionindex.Prefix + "-.alice", `{"run":`},             // not JSON
		{sessionindex.Prefix + "-.bob", `{"run":"2; rm -rf /"}`}, // not a sequence
	} {
		if _, err := b.js.Publish(b.ctx, m.subj, []byte(m.data)); err != nil {
			t.Fatal(err)
		}
	}
	b.put(t, "good:2", "3")
	p, err := b.x.Newest(b.ctx, sessionindex.Query{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, e := range p.Entries {
		keys = append(keys, e.Key)
	}
	if !slices.Equal(keys, []string{"good:2", "good:1"}) || p.Malformed != 4 {
		t.Fatalf("listed %v, %d malformed", keys, p.Malformed)
	}
	if n := strings.Count(b.log.String(), "not one of ours is skipped"); n != 4 {
		t.Fatalf("%d log lines:\n%s", n, b.log.String())
	}
}

// TestScanBound: a page whose entries are looked at one by one stops
// after MaxScan sequences, says Partial, and its Next goes on from there
// to the entries further down.
func TestScanBound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.put(t, "needle", "1")
	for i := range 500 {
		b.put(t, fmt.Sprintf("hay%03d", i), fmt.Sprint(i+2))
	}
	q := sessionindex.Query{Limit: 5, MaxScan: 200, Keep: func(e sessionindex.Entry) bool { return e.Key == "needle" }}
	p, err := b.x.Newest(b.ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Partial || len(p.Entries) != 0 || p.Next == 0 || p.Read > 200 {
		t.Fatalf("first page: %+v", p)
	}
	found := false
	for range 10 {
		q.Before = p.Next
		if p, err = b.x.Newest(b.ctx, q); err != nil {
			t.Fatal(err)
		}
		if len(p.Entries) == 1 && p.Entries[0].Key == "needle" {
			found = true
			break
		}
	}
	if !found {
		t.Fatalf("the needle is never found: %+v", p)
	}
}

// TestTouchAndRemove: Touch writes without waiting (the entry is stored
// in its time); Remove deletes it; Lookup reads single keys.
func TestTouchAndRemove(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cons, err := b.js.OrderedConsumer(b.ctx, sessionindex.Stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	b.x.Touch("acme:one", sessionindex.Record{Run: "7"})
	b.x.Touch("two", sessionindex.Record{Run: "8", Committed: true, Through: 8, Turns: 3, Parent: "acme:one"})
	for range 2 {
		if _, err := cons.Next(jetstream.FetchContext(b.ctx)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := b.x.Lookup(b.ctx, []string{"acme:one", "two", "three"})
	if err != nil || len(got) != 2 || got[0].Key != "two" || got[0].Run != "8" || got[0].Turns != 3 || got[0].Parent != "acme:one" || got[1].Key != "acme:one" {
		t.Fatalf("lookup: %+v, %v", got, err)
	}
	b.x.Forgotten(b.ctx, "two")
	if n, err := b.x.Count(b.ctx); err != nil || n != 1 {
		t.Fatalf("after a forget: %d entries, %v", n, err)
	}
	if b.x.Failures() != 0 {
		t.Fatalf("%d failed writes: %s", b.x.Failures(), b.log.String())
	}
}

// TestSeed: Seed writes the entry of a session without one, and leaves
// the entry of a session a turn touched meanwhile where it is.
func TestSeed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.put(t, "acme:touched", "9")
	for _, key := range []string{"acme:old", "acme:touched"} {
		if err := b.x.Seed(b.ctx, key, "1"); err != nil {
			t.Fatalf("seed %s: %v", key, err)
		}
	}
	got, err := b.x.Lookup(b.ctx, []string{"acme:old", "acme:touched"})
	if err != nil || len(got) != 2 || got[0].Key != "acme:old" || got[0].Run != "1" || got[1].Key != "acme:touched" || got[1].Run != "9" {
		t.Fatalf("after seeding: %+v, %v", got, err)
	}
}

// TestQueued: Queued lists a session without an entry, and leaves a
// listed session's entry (its place and summary) as it was: refused by
// the server when another worker's index listed it (a refusal that is no
// failure), not even sent when this one did, and sent again once this
// one removed it.
func TestQueued(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other, _, err := sessionindex.Ensure(b.ctx, b.js, sessionindex.Config{Logger: zerolog.New(b.log)})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	cons, err := b.js.OrderedConsumer(b.ctx, sessionindex.Stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	next := func() string {
		t.Helper()
		m, err := cons.Next(jetstream.FetchContext(b.ctx))
		if err != nil {
			t.Fatal(err)
		}
		return m.Subject()
	}
	subject := func(key string) string { s, _ := sessionindex.Subject(key); return s }
	b.x.Touch("acme:listed", sessionindex.Record{Run: "3", Committed: true, Turns: 2})
	if got := next(); got != subject("acme:listed") {
		t.Fatalf("stored %s", got)
	}
	other.Queued("acme:listed", "9") // refused by the server
	b.x.Queued("acme:listed", "9")   // not sent
	b.x.Queued("acme:new", "10")
	// Publishes of one connection are stored in order: nothing of
	// acme:listed's comes before acme:new's entry.
	if got := next(); got != subject("acme:new") {
		t.Fatalf("stored %s, want acme:new's entry", got)
	}
	got, err := b.x.Lookup(b.ctx, []string{"acme:listed", "acme:new"})
	if err != nil || len(got) != 2 || got[0].Key != "acme:new" || got[0].Run != "10" || got[0].Committed ||
		got[1].Key != "acme:listed" || got[1].Run != "3" || got[1].Turns != 2 {
		t.Fatalf("entries %+v, %v", got, err)
	}
	b.x.Forgotten(b.ctx, "acme:new")
	b.x.Queued("acme:new", "11")
	if got := next(); got != subject("acme:new") {
		t.Fatalf("stored %s, want acme:new's entry again", got)
	}
	if b.x.Failures()+other.Failures() != 0 {
		t.Fatalf("%d failed writes: %s", b.x.Failures()+other.Failures(), b.log.String())
	}
}

// lines is a log that hands each line written to it to the test.
type lines chan string

func (l lines) Write(p []byte) (int, error) {
	l <- string(p)
	return len(p), nil
}

// logging opens another index of b's stream, whose log lines go to the
// test.
func (b *bundle) logging(t *testing.T) (*sessionindex.Index, lines) {
	t.Helper()
	logged := make(lines, 16)
	x, _, err := sessionindex.Ensure(b.ctx, b.js, sessionindex.Config{Logger: zerolog.New(logged)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = x.Close() })
	return x, logged
}

// TestQueuedAfterFailedWrite: a Queued whose write the server does not
// store (here the stream is gone) leaves the session unlisted, so the
// next Queued, once the stream is back, writes its entry again. It was
// marked listed as the write went out and stayed so: the session was not
// listed until its turn started.
func TestQueuedAfterFailedWrite(t *testing.T) {
	t.Parallel()
	b := setup(t)
	x, logged := b.logging(t)
	st, err := b.js.Stream(b.ctx, sessionindex.Stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	if err := b.js.DeleteStream(b.ctx, sessionindex.Stream); err != nil {
		t.Fatal(err)
	}
	x.Queued("acme:waiting", "1")
	select { // the failed write's ack, handled
	case line := <-logged:
		if !strings.Contains(line, "an entry was not written") {
			t.Fatalf("logged %s", line)
		}
	case <-b.ctx.Done():
		t.Fatal("the failed write was not noticed")
	}
	// A create right after the delete can find the old stream's store
	// still being removed ("error creating store for stream"): retried.
	natstest.Settle(t, func(ctx context.Context) error {
		_, err := b.js.CreateStream(ctx, cfg)
		return err
	})
	cons, err := b.js.OrderedConsumer(b.ctx, sessionindex.Stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	x.Queued("acme:waiting", "2")
	x.Queued("acme:other", "3")
	// Publishes of one connection are stored in order: acme:waiting's
	// entry comes first unless it was not sent.
	m, err := cons.Next(jetstream.FetchContext(b.ctx))
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := sessionindex.Subject("acme:waiting"); m.Subject() != want {
		t.Fatalf("stored %s first, want acme:waiting's entry", m.Subject())
	}
	if n := x.Failures(); n != 1 {
		t.Errorf("%d failures, want 1", n)
	}
}

// TestSeedRaceReplicated: Seeds of one session racing on a replicated
// index, where a conditional write meeting another in flight is refused
// with 10164 rather than 10071, all succeed and leave one entry. They
// failed with "wrong last sequence" (10164), which the fleet logged as a
// warning (integration TestFaultLeaseRaceOnR3).
func TestSeedRaceReplicated(t *testing.T) {
	t.Parallel()
	cl := natstest.StartCluster(t, 3)
	js := natstest.JetStream(t, cl.URL())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var x *sessionindex.Index
	natstest.Settle(t, func(ctx context.Context) error {
		var err error
		x, _, err = sessionindex.Ensure(ctx, js, sessionindex.Config{Replicas: 3})
		return err
	})
	defer x.Close()
	// The new stream answers once its leader is elected: one seed first,
	// of a key the racers seed too (they lose to it, as they should).
	natstest.Settle(t, func(ctx context.Context) error { return x.Seed(ctx, "acme:0", "0") })
	const keys, racers = 8, 8
	var wg sync.WaitGroup
	errs := make(chan error, keys*racers)
	seed := func(key, run string) error {
		for {
			// A leader change on a busy box leaves a write unanswered:
			// that is not the race this test is about, so it is tried
			// again (until ctx's minute is over).
			err := x.Seed(ctx, key, run)
			if !errors.Is(err, jetstream.ErrNoStreamResponse) || ctx.Err() != nil {
				return err
			}
		}
	}
	for k := range keys {
		for r := range racers {
			wg.Go(func() { errs <- seed(fmt.Sprintf("acme:%d", k), fmt.Sprint(r+1)) })
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a seed that lost its race: %v", err)
		}
	}
	if n, err := x.Count(ctx); err != nil || n != keys {
		t.Fatalf("%d entries, %v", n, err)
	}
}

// TestMaxBytes: the index's byte limit is its own when given, else a
// sixteenth of the lanes bucket's (so it fits an account sized for the
// bucket), else the default; -1 (either) is none; a new limit is applied
// to the stream at the next Ensure.
func TestMaxBytes(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := natstest.JetStream(t, srv.URL)
	for _, c := range []struct {
		name string
		cfg  sessionindex.Config
		want int64
	}{
		{"defaults", sessionindex.Config{}, sessionindex.DefaultMaxBytes},
		{"a share of the lanes", sessionindex.Config{LanesMaxBytes: 64 << 20}, 4 << 20},
		{"the default lanes' share is the default", sessionindex.Config{LanesMaxBytes: 4 << 30}, sessionindex.DefaultMaxBytes},
		{"lanes without a limit", sessionindex.Config{LanesMaxBytes: -1}, -1},
		{"its own", sessionindex.Config{MaxBytes: 8 << 20, LanesMaxBytes: 64 << 20}, 8 << 20},
		{"none", sessionindex.Config{MaxBytes: -1, LanesMaxBytes: 64 << 20}, -1},
	} {
		x, _, err := sessionindex.Ensure(t.Context(), js, c.cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		_ = x.Close()
		s, err := js.Stream(t.Context(), sessionindex.Stream)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().Config.MaxBytes; got != c.want {
			t.Errorf("%s: MaxBytes %d, want %d", c.name, got, c.want)
		}
	}
}

// TestFilterNoKeysGroup: a scope prefix whose group no key can have (not
// valid UTF-8) reads the whole index entry by entry, not the sessions
// without a group as if the prefix were theirs.
func TestFilterNoKeysGroup(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"\xff:", "\xff:x", strings.Repeat("a", 1000) + ":"} {
		if f, exact := sessionindex.Filter(prefix); f != sessionindex.Prefix+"*.*" || exact {
			t.Errorf("%.20q: filter %q exact %v, want the whole index, not exact", prefix, f, exact)
		}
	}
	if f, exact := sessionindex.Filter("acme:"); f == sessionindex.Prefix+"*.*" || !exact {
		t.Errorf("acme: filter %q exact %v, want its group's, exact", f, exact)
	}
}

// TestForgedAckWritesNothing: an ack that another client publishes to the
// index's acks inbox makes no session be written again, nor counts as a
// failure: the reply subject of a write seen on the index's subjects sent
// again with an error, or with what is no ack at all, after the write's
// own ack came, and a guess of another write's tag. Such an ack unmarked
// the session (its hash was all the reply named), so its next Queued
// wrote again, refused by the server (or wrote a session's entry that a
// listing had dropped).
func TestForgedAckWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	x, logged := b.logging(t)
	nc := b.js.Conn()
	// The forger sees every write on the index's subjects, as a client
	// allowed to subscribe to them does.
	forger := natstest.Connect(t, nc.ConnectedUrl())
	seen, err := forger.SubscribeSync(sessionindex.Prefix + ">")
	if err != nil {
		t.Fatal(err)
	}
	if err := forger.Flush(); err != nil {
		t.Fatal(err)
	}
	spy := natstest.Spy(t, nc.ConnectedUrl(), sessionindex.Prefix+">")
	// fence makes a write the server refuses (a record over the
	// stream's largest message) and waits for its failure to be
	// logged: the acks before it, of one connection's writes to one
	// stream, and the forger's messages sent before it (flushed), have
	// been handled by then.
	fences := 0
	fence := func() (before []string) {
		t.Helper()
		fences++
		x.Touch("acme:fence", sessionindex.Record{Parent: strings.Repeat("p", 4096)})
		for {
			select {
			case line := <-logged:
				if strings.Contains(line, "maximum") {
					return before
				}
				before = append(before, line)
			case <-b.ctx.Done():
				t.Fatal("the fence's failure was not logged")
			}
		}
	}
	x.Queued("acme:waiting", "1")
	m, err := seen.NextMsg(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := sessionindex.Subject("acme:waiting")
	if m.Subject != want || m.Reply == "" {
		t.Fatalf("saw %s (reply %q), want acme:waiting's write", m.Subject, m.Reply)
	}
	if logged := fence(); len(logged) != 0 { // acme:waiting's ack came: it is listed
		t.Fatalf("logged %q", logged)
	}
	spy(nc)
	i := strings.LastIndexByte(m.Reply, '.')
	for _, forged := range []struct{ reply, data string }{
		{m.Reply, `{"error":{"code":503,"err_code":10077,"description":"forged"}}`},
		{m.Reply, "forged: no ack"},
		{m.Reply[:i+1] + "1", `{"error":{"code":503,"err_code":10077,"description":"forged"}}`},
	} {
		if err := forger.Publish(forged.reply, []byte(forged.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := forger.Flush(); err != nil {
		t.Fatal(err)
	}
	if logged := fence(); len(logged) != 0 {
		t.Errorf("the forged acks were logged: %q", logged)
	}
	fenceSubj, _ := sessionindex.Subject("acme:fence")
	if got := spy(nc); !slices.Equal(got, []string{fenceSubj}) {
		t.Fatalf("wrote %v, want the fence's entry", got)
	}
	x.Queued("acme:waiting", "2")
	if got := spy(nc); len(got) != 0 {
		t.Errorf("the forged acks made acme:waiting's entry be written again: %v", got)
	}
	if n := x.Failures(); n != int64(fences) {
		t.Errorf("%d failures, want %d (the fences')", n, fences)
	}
}
