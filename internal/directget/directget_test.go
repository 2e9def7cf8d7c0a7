package directget_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/internal/directget"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// msgSeq is the sequence of subj's message in msgs.
func msgSeq(t *testing.T, msgs []directget.Msg, subj string) uint64 {
	t.Helper()
	for _, m := range msgs {
		if m.Subject == subj {
			return m.Seq
		}
	}
	t.Fatalf("no message of %s", subj)
	return 0
}

// TestLast: the last message of each of more subjects than one answer may
// hold is read in parts (the filters halved), each subject once with its
// newest message, a subject the filters of both halves match too; one filter matching too many is ErrTooMany; no match is
// none. Meta drops each message's data and headers. A batch says what it
// left.
func TestLast(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := natstest.JetStream(t, srv.URL)
	nc := js.Conn()
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	const n = directget.MultiLastMax + 500
	var filters []string
	for i := range n {
		subj := "s." + strconv.Itoa(i)
		filters = append(filters, subj)
		for v := range 2 {
			if _, err := js.PublishAsync(subj, []byte(strconv.Itoa(v)), jetstream.WithStallWait(time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
	}
	<-js.PublishAsyncComplete()
	subject := directget.Subject(js, "S")
	// s.5 asked again: in the other half.
	msgs, err := directget.Last(ctx, nc, subject, directget.Request{MultiLast: append(filters, "s.5")})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range msgs {
		if seen[m.Subject] || string(m.Data) != "1" || m.Time.IsZero() {
			t.Fatalf("%s: seq %d %q, seen before: %v", m.Subject, m.Seq, m.Data, seen[m.Subject])
		}
		seen[m.Subject] = true
	}
	if len(seen) != n {
		t.Fatalf("%d subjects, want %d", len(seen), n)
	}
	if _, err := directget.Last(ctx, nc, subject, directget.Request{MultiLast: []string{"s.*"}}); !errors.Is(err, directget.ErrTooMany) {
		t.Fatalf("one filter over %d subjects: %v", directget.MultiLastMax, err)
	}
	if msgs, err := directget.Last(ctx, nc, subject, directget.Request{MultiLast: []string{"s.none"}}); err != nil || len(msgs) != 0 {
		t.Fatalf("no match: %v, %v", msgs, err)
	}
	// Meta: where the last message is, not what it holds.
	meta, err := directget.Last(ctx, nc, subject, directget.Request{MultiLast: []string{"s.3"}, Meta: true})
	if err != nil || len(meta) != 1 || meta[0].Subject != "s.3" || meta[0].Seq != msgSeq(t, msgs, "s.3") || meta[0].Time.IsZero() ||
		meta[0].Data != nil || meta[0].Header != nil {
		t.Fatalf("the last message of s.3, its data and headers dropped: %+v, %v", meta, err)
	}
	rep, err := directget.Get(ctx, nc, subject, directget.Request{NextFor: "s.7", Batch: 1}, 1)
	if err != nil || len(rep.Msgs) != 1 || rep.Pending != 1 {
		t.Fatalf("a batch of one of a subject's two messages: %+v, %v", rep, err)
	}
}

// TestErrorsSayWhat: an error names what the request asked: a multi-last
// get its filters (it said "from 0", a batch's start, which it has none
// of), a batch its subject and start. Here the stream is missing: no
// responders.
func TestErrorsSayWhat(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := natstest.JetStream(t, srv.URL)
	nc := js.Conn()
	subject := directget.Subject(js, "MISSING")
	for _, c := range []struct {
		req  directget.Request
		want string
	}{
		{directget.Request{MultiLast: []string{"s.1", "s.2", "s.3"}}, "the last of s.1 and 2 more filters: "},
		{directget.Request{MultiLast: []string{"s.1"}, Seq: 9}, "the last of s.1 from 9: "},
		{directget.Request{NextFor: "s.7", Seq: 4, Batch: 1}, "s.7 from 4: "},
		{directget.Request{Seq: 5, Batch: 1}, "from 5: "},
	} {
		_, err := directget.Get(t.Context(), nc, subject, c.req, 0)
		if !errors.Is(err, nats.ErrNoResponders) || !strings.Contains(err.Error(), "DIRECT.GET.MISSING "+c.want) {
			t.Errorf("%+v: %v, want %q", c.req, err, c.want)
		}
	}
}

// TestCraftedReplies: an answer is bytes from the network. One whose
// messages do not rise in sequence from the request's, or lack their
// subject or time (a listing's activity read as year 1), or whose end of
// batch says messages are pending after none were sent, or says what is
// pending in no number, is an error: read as it came, a listing ended
// early on it, or Last asked again from where it stood, forever.
func TestCraftedReplies(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	msg := func(seq string) *nats.Msg {
		m := nats.NewMsg("")
		m.Header.Set(jetstream.SequenceHeader, seq)
		m.Header.Set(jetstream.SubjectHeader, "s.1")
		m.Header.Set(jetstream.TimeStampHeaer, time.Now().UTC().Format(time.RFC3339Nano))
		return m
	}
	eob := func(pending string) *nats.Msg {
		m := nats.NewMsg("")
		m.Header.Set("Status", "204")
		m.Header.Set("Nats-Num-Pending", pending)
		return m
	}
	notime, nosubj := msg("5"), msg("5")
	notime.Header.Set(jetstream.TimeStampHeaer, "yesterday")
	nosubj.Header.Del(jetstream.SubjectHeader)
	for i, c := range []struct {
		name  string
		reply []*nats.Msg
		req   directget.Request
	}{
		{"falling sequences", []*nats.Msg{msg("5"), msg("3"), eob("0")}, directget.Request{Seq: 1, Batch: 5}},
		{"a sequence twice", []*nats.Msg{msg("5"), msg("5"), eob("0")}, directget.Request{Seq: 1, Batch: 5}},
		{"below the request's", []*nats.Msg{msg("3"), eob("0")}, directget.Request{Seq: 4, Batch: 5}},
		{"pending after nothing", []*nats.Msg{eob("7")}, directget.Request{Seq: 1, Batch: 5}},
		{"pending in no number", []*nats.Msg{msg("5"), eob("many")}, directget.Request{Seq: 1, Batch: 5}},
		{"no pending count", []*nats.Msg{msg("5"), eob("")}, directget.Request{Seq: 1, Batch: 5}},
		{"no time", []*nats.Msg{notime, eob("0")}, directget.Request{Seq: 1, Batch: 5}},
		{"no subject", []*nats.Msg{nosubj, eob("0")}, directget.Request{Seq: 1, Batch: 5}},
	} {
		subject := "crafted." + strconv.Itoa(i)
		sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
			for _, r := range c.reply {
				r.Subject = m.Reply
				_ = nc.PublishMsg(r)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := directget.Get(t.Context(), nc, subject, c.req, 0); err == nil {
			t.Errorf("%s: no error", c.name)
		}
		_ = sub.Unsubscribe()
	}
	// Last, whose crafted parts each say one more is pending past a
	// message below where it asked from, stops with an error.
	sub, err := nc.Subscribe("crafted.last", func(m *nats.Msg) {
		for _, r := range []*nats.Msg{msg("5"), eob("1")} {
			r.Subject = m.Reply
			_ = nc.PublishMsg(r)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := directget.Last(ctx, nc, "crafted.last", directget.Request{MultiLast: []string{"s.*"}}); err == nil || ctx.Err() != nil {
		t.Fatalf("Last of an answer that never moves on: %v (context: %v)", err, ctx.Err())
	}
}

// TestAnswerComesOnce: an answer crosses the wire once, also on a
// connection that has made requests (whose request mux subscribes to
// every inbox under its own): the old inbox, under the mux's, had every
// message of an answer sent twice, a lane's 800 KB message 1.6 MB.
func TestAnswerComesOnce(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := natstest.JetStream(t, srv.URL)
	nc := js.Conn()
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	const size = 800 << 10
	for _, data := range [][]byte{make([]byte, size), []byte("x")} {
		if _, err := js.Publish(t.Context(), "s.1", data); err != nil { // requests: the mux is there
			t.Fatal(err)
		}
	}
	msgs, bytes := nc.Stats().InMsgs, nc.Stats().InBytes
	rep, err := directget.Get(t.Context(), nc, directget.Subject(js, "S"), directget.Request{NextFor: "s.1", Batch: 1}, 0)
	if err != nil || len(rep.Msgs) != 1 || rep.Pending != 1 {
		t.Fatalf("%+v, %v", rep, err)
	}
	// What the server sent is on the connection before the flush's pong.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, b := nc.Stats().InMsgs-msgs, nc.Stats().InBytes-bytes; n != 2 || b >= 2*size {
		t.Errorf("a batch of one %d-byte message came as %d messages, %d bytes; want it and its end, once", size, n, b)
	}
}

// TestMultiLastNotFound: a multi-last get's 404 is none only when it says
// "No Results" (what the server says when nothing matches); the 404 it
// sends when a message it found failed to load is an error (it read as
// none).
func TestMultiLastNotFound(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	for _, c := range []struct {
		description string
		fails       bool
	}{{"No Results", false}, {"Message Not Found", true}} {
		subject := "notfound." + strings.ReplaceAll(c.description, " ", "")
		sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
			r := nats.NewMsg(m.Reply)
			r.Header.Set("Status", "404")
			r.Header.Set("Description", c.description)
			_ = nc.PublishMsg(r)
		})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := directget.Get(t.Context(), nc, subject, directget.Request{MultiLast: []string{"s.1"}}, 0)
		if (err != nil) != c.fails || len(rep.Msgs) != 0 {
			t.Errorf("404 %s: %+v, %v", c.description, rep, err)
		}
		// A batch's 404 is none, whatever it says.
		if rep, err := directget.Get(t.Context(), nc, subject, directget.Request{Seq: 1, Batch: 2}, 0); err != nil || len(rep.Msgs) != 0 {
			t.Errorf("a batch's 404 %s: %+v, %v", c.description, rep, err)
		}
		_ = sub.Unsubscribe()
	}
	// The server's own answer to a multi-last get of nothing is none.
	js := natstest.JetStream(t, srv.URL)
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(t.Context(), "s.1", nil); err != nil {
		t.Fatal(err)
	}
	if msgs, err := directget.Last(t.Context(), nc, directget.Subject(js, "S"), directget.Request{MultiLast: []string{"s.2"}}); err != nil || len(msgs) != 0 {
		t.Errorf("the last of nothing: %+v, %v", msgs, err)
	}
}

// TestGetEndsWithItsContext: a cancelled context ends the wait for an
// answer at once, whatever the server does: one that never answers, one
// that keeps sending (the old per-message wait read its messages on past
// the cancel to the end, 20,000 of them, and returned no error), and a
// context cancelled before the request.
func TestGetEndsWithItsContext(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	server := natstest.Connect(t, srv.URL)
	asked := make(chan string, 3)
	if _, err := server.Subscribe("silent", func(m *nats.Msg) { asked <- m.Reply }); err != nil {
		t.Fatal(err)
	}
	const many = 20000
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	if _, err := server.Subscribe("endless", func(m *nats.Msg) {
		go func() {
			for seq := 1; seq <= many; seq++ {
				r := nats.NewMsg(m.Reply)
				r.Header.Set(jetstream.SequenceHeader, strconv.Itoa(seq))
				r.Header.Set(jetstream.SubjectHeader, "s.1")
				r.Header.Set(jetstream.TimeStampHeaer, time.Now().UTC().Format(time.RFC3339Nano))
				select {
				case <-stop:
					return
				default:
				}
				_ = server.PublishMsg(r)
				if seq == 1 {
					asked <- m.Reply
				}
			}
			eob := nats.NewMsg(m.Reply)
			eob.Header.Set("Status", "204")
			eob.Header.Set("Nats-Num-Pending", "0")
			_ = server.PublishMsg(eob)
		}()
	}); err != nil {
		t.Fatal(err)
	}
	if err := server.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, subject := range []string{"silent", "endless"} {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			rep, err := directget.Get(ctx, nc, subject, directget.Request{Seq: 1, Batch: many}, 0)
			if err == nil {
				err = errors.New("no error, " + strconv.Itoa(len(rep.Msgs)) + " messages")
			}
			done <- err
		}()
		<-asked // the request is at the server, which answers as it does
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v, want the context's cancel", subject, err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := directget.Get(ctx, nc, "silent", directget.Request{Seq: 1}, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("a context cancelled before: %v", err)
	}
}

// TestNotServed: a stream that does not allow Direct Get answers nothing,
// at once: ErrNotServed, which a reader falls back on.
func TestNotServed(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := natstest.JetStream(t, srv.URL)
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(t.Context(), "s.1", nil); err != nil {
		t.Fatal(err)
	}
	_, err := directget.Get(t.Context(), js.Conn(), directget.Subject(js, "S"), directget.Request{Seq: 1, Batch: 1}, 0)
	if !errors.Is(err, directget.ErrNotServed) {
		t.Fatalf("Get: %v", err)
	}
	if _, err := directget.Last(t.Context(), js.Conn(), directget.Subject(js, "S"), directget.Request{MultiLast: []string{"s.1"}}); !errors.Is(err, directget.ErrNotServed) {
		t.Fatalf("Last: %v", err)
	}
}
