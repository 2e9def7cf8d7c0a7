package openai

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
)

// Kinds of streamed output.
const (
	kindText      = "text"
	kindReasoning = "reasoning"
)

// part is a piece of a run's streamed output as both wire APIs send it:
// a delta of the current item, or (start) the first delta of a new one.
type part struct {
	kind  string
	start bool
	delta string
}

// normalizer turns a run's events into parts, the same parts every time
// the same events are read (a response resumed by sequence number on
// another gateway process numbers them alike). An assistant or thinking
// event starts a new item when its kind changes or when its Text (the
// model message's text so far) is its Delta: a new model call. After a
// restart (the run's worker died, the next attempt runs it again), the
// replayed text of items already sent is dropped and only what goes
// beyond it is sent.
type normalizer struct {
	items  []normItem
	replay int // after a restart: index of the item being replayed; -1 none
	inRe   bool
}

type normItem struct {
	kind string
	text string
}

func (n *normalizer) feed(ev *events.Event) []part {
	switch ev.Stream {
	case events.StreamLifecycle:
		if ev.Data.Phase == events.PhaseRestart && len(n.items) > 0 {
			n.inRe, n.replay = true, -1
		}
		return nil
	case events.StreamAssistant, events.StreamThinking:
	default:
		return nil
	}
	d := ev.Data
	if d.Delta == "" {
		return nil
	}
	kind := kindText
	if ev.Stream == events.StreamThinking {
		kind = kindReasoning
	}
	newMsg := d.Text == d.Delta
	if n.inRe {
		if pos := n.replay; pos < 0 || newMsg || n.items[pos].kind != kind {
			n.replay++
		}
		if n.replay < len(n.items) && n.items[n.replay].kind == kind {
			it := &n.items[n.replay]
			if strings.HasPrefix(it.text, d.Text) {
				return nil // replayed
			}
			if n.replay == len(n.items)-1 && strings.HasPrefix(d.Text, it.text) {
				delta := d.Text[len(it.text):]
				it.text = d.Text
				n.inRe = false
				return []part{{kind: kind, delta: delta}}
			}
		}
		n.inRe = false
		newMsg = true
	}
	if last := len(n.items) - 1; last >= 0 && n.items[last].kind == kind && !newMsg {
		n.items[last].text += d.Delta
		return []part{{kind: kind, delta: d.Delta}}
	}
	n.items = append(n.items, normItem{kind: kind, text: d.Delta})
	return []part{{kind: kind, start: true, delta: d.Delta}}
}

// sse writes server-sent events; what it wrote goes out at each flush
// (when following has no more events at hand, see pump) and at its end.
// The stream is held
// (nothing written, not even the status) until its first event that is
// not a preamble, so a request that fails before any output gets a plain
// error response with its status, as OpenAI answers one.
type sse struct {
	w       http.ResponseWriter
	f       *http.ResponseController
	timeout time.Duration // bounds each write: a client that stops reading ends its stream
	held    bool
	dirty   bool   // written since the last flush
	buf     []byte // preamble events written while held
	scratch []byte // the event being written (see delta): kept for the next
	unbound int    // bytes written under the current write deadline
}

func newSSE(w http.ResponseWriter, timeout time.Duration) *sse {
	return &sse{w: w, f: http.NewResponseController(w), timeout: timeout, held: true}
}

// end flushes what is left, then clears the write deadline, which would
// outlive the stream on a connection the client goes on using.
func (s *sse) end() {
	_ = s.flush()
	_ = s.f.SetWriteDeadline(time.Time{})
}

// write writes b, within the write timeout; a flush sends it. The
// deadline is set by the first write after a flush, for the writes and
// the flush that follow it: they are the events at hand, written
// together a moment later (pump), so one deadline bounds them all
// without resetting the connection's timer for every event. A long
// catch-up (a resumed stream of a long run) writes more before its flush
// than a slow client reads within one timeout: each deadlineBytes
// written get a deadline of their own.
func (s *sse) write(b []byte) error {
	if !s.dirty || s.unbound > deadlineBytes {
		_ = s.f.SetWriteDeadline(time.Now().Add(s.timeout)) // a writer without deadlines writes without
		s.unbound = 0
	}
	s.unbound += len(b)
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	s.dirty = true
	return nil
}

// deadlineBytes is the most a stream writes under one write deadline.
const deadlineBytes = 64 << 10

// flush sends what was written since the last flush, within the write
// timeout the first of those writes set (a moment ago: a flush follows
// its writes).
func (s *sse) flush() error {
	if !s.dirty {
		return nil
	}
	s.dirty = false
	return s.f.Flush()
}

// open writes the status, the headers and the held preamble.
func (s *sse) open() error {
	if !s.held {
		return nil
	}
	s.held = false
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	buf := s.buf
	s.buf = nil
	return s.write(buf)
}

// refuse answers with e instead of a stream, if nothing was written yet.
func (s *sse) refuse(e *apiError) bool {
	if !s.held {
		return false
	}
	s.held, s.buf = false, nil
	writeError(s.w, e)
	return true
}

func frame(name string, data []byte) []byte {
	var b []byte
	if name != "" {
		b = append(append(append(b, "event: "...), name...), '\n')
	}
	return append(append(append(b, "data: "...), data...), "\n\n"...)
}

// pre writes a preamble event: held with the stream.
func (s *sse) pre(name string, data []byte) error {
	if s.held {
		s.buf = append(s.buf, frame(name, data)...)
		return nil
	}
	return s.event(name, data)
}

// event writes one event, "event: name" when name is set, then the data,
// opening the stream.
func (s *sse) event(name string, data []byte) error {
	if err := s.open(); err != nil {
		return err
	}
	return s.write(frame(name, data))
}

// comment writes a comment line, which keeps a quiet stream open, and
// flushes.
func (s *sse) comment() error {
	if err := s.open(); err != nil {
		return err
	}
	if err := s.write([]byte(": keep-alive\n\n")); err != nil {
		return err
	}
	return s.flush()
}

// errPollDone ends a poll's following: it has waited long enough.
var errPollDone = errors.New("poll: waited long enough")

// followed is one event of a run being followed, the error that ended
// following, or (caughtUp) word that following has no more events at hand.
type followed struct {
	ev       *events.Event
	err      error
	caughtUp bool
}

// follow iterates run's events on a goroutine of its own until the final
// one, an error, or ctx ends; stop ends it and waits for it. With
// caughtUp, it also says when following has yielded every event at hand
// and waits for more (lanefleet.Run.OnCaughtUp).
func follow(ctx context.Context, run *lanefleet.Run, caughtUp bool) (<-chan followed, func()) {
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan followed)
	done := make(chan struct{})
	if caughtUp {
		run.OnCaughtUp(func() {
			select {
			case ch <- followed{caughtUp: true}:
			case <-ctx.Done():
			}
		})
	}
	go func() {
		defer close(done)
		defer close(ch)
		for ev, err := range run.Events(ctx) {
			var de *events.DecodeError
			if errors.As(err, &de) {
				continue // not an event of the run
			}
			select {
			case ch <- followed{ev: ev, err: err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return ch, func() { cancel(); <-done }
}

// pump follows run and calls fn with each event until the final one (or
// fn returns false). Whenever following has no more events at hand, flush
// is called (nil: nothing), so what fn wrote of the events that came
// together goes out together. While no event comes for keepAlive, idle is
// called (nil: nothing). Following ends when ctx does; the run goes on.
// It returns the error that ended following early, if any.
func pump(ctx context.Context, run *lanefleet.Run, keepAlive time.Duration, flush, idle func() error, fn func(*events.Event) bool) error {
	ch, stop := follow(ctx, run, flush != nil)
	defer stop()
	timer := time.NewTimer(keepAlive)
	defer timer.Stop()
	for {
		select {
		case it, ok := <-ch:
			if !ok {
				return context.Cause(ctx)
			}
			if it.caughtUp {
				if err := flush(); err != nil {
					return err
				}
				continue
			}
			if it.err != nil {
				return it.err
			}
			if !fn(it.ev) || it.ev.Terminal() {
				return nil
			}
			timer.Reset(keepAlive)
		case <-timer.C:
			if idle != nil {
				if err := idle(); err != nil {
					return err
				}
			}
			timer.Reset(keepAlive)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// pollRun reads the run's events as they are now: it calls fn with each
// until the final one, or until the run settles (none came for quiet
// after one came, or after the fleet said the run waits: queued, no
// worker, a hand-over), or for at most limit. A run the fleet does not
// know ends with lanefleet.ErrUnknownRun (within about a second).
func pollRun(ctx context.Context, run *lanefleet.Run, quiet, limit time.Duration, fn func(*events.Event)) error {
	ctx, cancel := context.WithTimeoutCause(ctx, limit, errPollDone)
	defer cancel()
	waits := make(chan struct{}, 1)
	run.OnWait(0, func(lanefleet.Wait) {
		select {
		case waits <- struct{}{}:
		default:
		}
	})
	ch, stop := follow(ctx, run, false)
	defer stop()
	timer := time.NewTimer(limit) // armed with quiet once the run shows itself
	defer timer.Stop()
	for {
		select {
		case it, ok := <-ch:
			if !ok {
				return pollEnd(ctx)
			}
			if it.err != nil {
				if ctx.Err() != nil {
					return pollEnd(ctx)
				}
				return it.err
			}
			fn(it.ev)
			if it.ev.Terminal() {
				return nil
			}
			timer.Reset(quiet)
		case <-waits:
			timer.Reset(quiet)
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return pollEnd(ctx)
		}
	}
}

// pollEnd is nil when the poll's own limit ended it, else why ctx ended.
func pollEnd(ctx context.Context) error {
	if err := context.Cause(ctx); !errors.Is(err, errPollDone) {
		return err
	}
	return nil
}
