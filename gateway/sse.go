package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
)

// errStreamIdle ends a stream that saw no event for Config.StreamIdle.
var errStreamIdle = errors.New("gateway: stream idle")

// errShutdown ends the streams of a gateway that shuts down.
var errShutdown = errors.New("gateway: shutting down")

// stream is one open server-sent event stream. Its handler writes events;
// the server's keep-alive sweeper writes a comment line to a stream that
// was quiet for a while and ends one quiet for too long. Both write under
// mu, and the handler takes the stream off the sweeper's list (under mu)
// before it returns, so nothing writes to a finished response.
type stream struct {
	mu sync.Mutex
	// conn is the hijacked HTTP/1.1 connection the stream writes to; nil
	// on HTTP/2, where it writes to w through rc.
	conn   net.Conn
	w      http.ResponseWriter
	rc     *http.ResponseController
	last   time.Time // last write
	event  time.Time // last event
	cancel context.CancelCauseFunc
	done   bool
	// held is what the stream holds back to go out with its next write
	// (hold): its head, until the first events; the run's lifecycle start,
	// until its first output; its end, until its final. release writes it
	// on its own if nothing comes first.
	held    []byte
	release *time.Timer
}

// headHold is how long a stream's head waits for the run's first events
// to go out with them, in one write to the connection instead of two
// (the head, then the events, each a write and the client's wake-up). A
// run that does not start within it (queued behind its session's earlier
// runs, or no worker) gets its head on its own then.
const headHold = time.Second

// leadsIn reports whether ev announces what follows it, to be held for it
// (lifecycleHold): the run's lifecycle start, an attempt's start (its
// model), the run's lifecycle end.
func leadsIn(ev *events.Event) bool {
	switch ev.Stream {
	case events.StreamAttempt:
		return true
	case events.StreamLifecycle:
		return ev.Data.Phase == events.PhaseStart || ev.Data.Phase == events.PhaseEnd
	}
	return false
}

// lifecycleHold is how long a run's lifecycle start event (and the
// attempt event after it) waits for the run's first output (the model's
// first delta, a tool's start), and its
// end event for the run's final (which follows once the turn is stored,
// moments later), to go out in one write with it instead of two. Nothing
// that comes after them waits: the first token goes out as it comes, and
// so does the final. A client that reads the start or the end gets it
// with what follows, or after this at the latest.
const lifecycleHold = 100 * time.Millisecond

// hold keeps b to go out with the next write, after what it holds
// already, or after d on its own, within timeout.
func (st *stream) hold(b []byte, d, timeout time.Duration) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done {
		return
	}
	if st.release != nil {
		st.release.Stop()
	}
	st.held, st.last = append(st.held, b...), time.Now()
	st.release = time.AfterFunc(d, func() {
		if err := st.send(nil, timeout, true); err != nil && !errors.Is(err, errShutdown) {
			st.cancel(err)
		}
	})
}

// write writes b and flushes, bounded by the write timeout (a client
// reading slowly is cut off).
func (st *stream) write(b []byte, timeout time.Duration) error {
	return st.send(b, timeout, true)
}

// send writes b, bounded by the write timeout, and flushes it when flush
// is set. A stream on net/http may leave its last write unflushed: the
// handler's return flushes it with the response's end, in one write to
// the connection instead of two. A hijacked stream writes unbuffered.
func (st *stream) send(b []byte, timeout time.Duration, flush bool) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done {
		return errShutdown
	}
	if st.held != nil {
		b = append(st.held, b...)
		st.held = nil
		st.release.Stop()
	}
	if len(b) == 0 {
		return nil
	}
	st.last = time.Now()
	if st.conn != nil {
		_ = st.conn.SetWriteDeadline(st.last.Add(timeout))
		_, err := st.conn.Write(b)
		return err
	}
	_ = st.rc.SetWriteDeadline(st.last.Add(timeout))
	if _, err := st.w.Write(b); err != nil {
		return err
	}
	if !flush {
		return nil
	}
	return st.rc.Flush()
}

// Keep-alive writes: at most this many at once, each given this long.
const (
	keepAliveWriters      = 32
	keepAliveWriteTimeout = time.Second
)

// hub holds the open streams and runs the keep-alive sweeper while there
// are any: one goroutine for every stream, not one each.
type hub struct {
	s       *Server
	mu      sync.Mutex
	streams map[*stream]struct{}
	running bool
}

func (h *hub) add(st *stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.streams == nil {
		h.streams = map[*stream]struct{}{}
	}
	h.streams[st] = struct{}{}
	if !h.running {
		h.running = true
		go h.sweep()
	}
}

// remove takes st off the list; nothing writes to it afterwards.
func (h *hub) remove(st *stream) {
	h.mu.Lock()
	delete(h.streams, st)
	h.mu.Unlock()
	st.mu.Lock()
	st.done = true
	if st.release != nil {
		st.release.Stop()
	}
	st.mu.Unlock()
}

// sweep writes keep-alives and ends idle streams until no stream is left.
func (h *hub) sweep() {
	period := h.s.cfg.KeepAlive / 2
	t := time.NewTicker(period)
	defer t.Stop()
	var batch []*stream
	sem := make(chan struct{}, keepAliveWriters)
	for {
		select {
		case <-t.C:
		case <-h.s.stopping:
		}
		stopping := false
		select {
		case <-h.s.stopping:
			stopping = true
		default:
		}
		h.mu.Lock()
		if len(h.streams) == 0 {
			h.running = false
			h.mu.Unlock()
			return
		}
		batch = batch[:0]
		for st := range h.streams {
			batch = append(batch, st)
		}
		h.mu.Unlock()
		now := time.Now()
		var wg sync.WaitGroup
		for _, st := range batch {
			if stopping {
				st.cancel(errShutdown)
				continue
			}
			st.mu.Lock()
			idle, quiet := now.Sub(st.event), now.Sub(st.last)
			st.mu.Unlock()
			switch {
			case idle >= h.s.cfg.StreamIdle:
				st.cancel(errStreamIdle)
			case quiet >= h.s.cfg.KeepAlive:
				// A keep-alive that cannot go out within a second means
				// the client has not read a socket's worth of buffer: it
				// is gone or stuck, and the stream ends. The writes go a
				// few at a time, so stuck clients do not hold up the
				// others' keep-alives.
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					if err := st.write([]byte(": keep-alive\n\n"), min(h.s.cfg.WriteTimeout, keepAliveWriteTimeout)); err != nil {
						st.cancel(err)
					}
				})
			}
		}
		wg.Wait()
		clear(batch)
		if stopping {
			// Wait for the handlers to take their streams off.
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// resumeAfter returns the seq a stream resumes after: the Last-Event-ID
// header, else the after query parameter, else 0 (from the first event).
func resumeAfter(r *http.Request) (uint64, *Problem) {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		v = r.URL.Query().Get("after")
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, newProblem(http.StatusBadRequest, CodeInvalidInput, "Last-Event-ID (or after) must be an event's seq, a number")
	}
	return n, nil
}

// streamRun writes run's events after seq `after` as server-sent events:
// "id:" is the event's seq, "event:" its stream, "data:" the event's JSON.
// It ends after the final event, when the client goes, when the stream is
// idle too long, or when the gateway shuts down: never the run itself.
// A client that reconnects with Last-Event-ID gets the events after it,
// each once.
func (s *Server) streamRun(w http.ResponseWriter, r *http.Request, run *lanefleet.Run, after uint64) {
	if n := s.streams.Add(1); n > int64(s.cfg.MaxStreams) {
		s.streams.Add(-1)
		p := newProblem(http.StatusServiceUnavailable, CodeOverloaded, "this gateway holds as many streams as it may; try another, or later")
		p.RetryAfter = 5
		writeProblem(w, r, p)
		return
	}
	s.metrics.streams.Inc()
	now := time.Now()
	if sw, ok := w.(*statusWriter); ok {
		sw.status, sw.written = http.StatusOK, now
	}
	// The stream outlives nothing of the request but its values (the
	// caller's trace): it ends by its own cancel.
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
	st := &stream{last: now, event: now, cancel: cancel}
	end := func() {
		cancel(nil)
		s.streams.Add(-1)
		s.metrics.streams.Dec()
	}
	if r.ProtoMajor == 1 && r.Method == http.MethodGet {
		// A follower's HTTP/1.1 stream (GET …/events: the long-lived
		// kind, thousands of which may idle) takes its connection over
		// and the handler returns: net/http's connection state, buffers
		// and reader goroutine go, and an idle stream costs one small
		// goroutine (its follower) and the follower's state. A client
		// that leaves is noticed at the next write (a keep-alive at the
		// latest). The body ends when the connection closes. A send's
		// own stream stays on net/http, so its connection is reused.
		head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\nConnection: close\r\n" +
			"Lanefleet-Run: " + run.ID + "\r\n" + corsLines(w.Header()) + "\r\n"
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			st.conn = conn
			release := takeRelease(r.Context())
			s.streamWG.Add(1)
			go func() {
				defer s.streamWG.Done()
				defer release()
				defer end()
				defer conn.Close()
				st.hold([]byte(head+": run "+run.ID+"\n\n"), s.headHold, s.cfg.WriteTimeout)
				s.follow(ctx, st, run, after)
			}()
			return
		}
	}
	defer end()
	st.w, st.rc = w, http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Set("Lanefleet-Run", run.ID)
	w.WriteHeader(http.StatusOK) // buffered: it goes out with the held head
	st.hold([]byte(": run "+run.ID+"\n\n"), s.headHold, s.cfg.WriteTimeout)
	// The request's end (the client left) ends the stream too.
	stop := context.AfterFunc(r.Context(), func() { cancel(context.Canceled) })
	defer stop()
	s.follow(ctx, st, run, after)
}

// sseBatchMax bounds the events a stream holds before it writes them
// (a catch-up's page of a long run, a burst of deltas).
const sseBatchMax = 32 << 10

// sseBuf is a stream's buffer of events not written yet and the encoder
// that writes into it, pooled: a turn's stream reuses one another
// stream grew instead of growing its own.
type sseBuf struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var sseBufs = sync.Pool{New: func() any {
	b := &sseBuf{}
	b.enc = json.NewEncoder(&b.buf)
	return b
}}

// appendEvent encodes ev into buf as a server-sent event: "id:" its
// seq, "event:" its stream, "data:" its JSON (as json.Marshal writes it;
// Encode's newline ends the data line). On an error buf is as it was.
func appendEvent(buf *bytes.Buffer, enc *json.Encoder, ev *events.Event) error {
	var num [20]byte
	mark := buf.Len()
	buf.WriteString("id: ")
	buf.Write(strconv.AppendUint(num[:0], ev.Seq, 10))
	buf.WriteString("\nevent: ")
	buf.WriteString(ev.Stream)
	buf.WriteString("\ndata: ")
	if err := enc.Encode(ev); err != nil {
		buf.Truncate(mark)
		return err
	}
	buf.WriteByte('\n')
	return nil
}

// follow writes the run's events after seq after to st until the final
// one, an error, or st's end. Events that come together go out together:
// they are encoded into the stream's buffer and written, with one flush,
// once following has none left at hand (Run.OnCaughtUp), so a burst costs
// the connection one write instead of one per event, and no event waits,
// but two: the run's lifecycle start is held for its first output, and
// its end for its final (lifecycleHold), so each pair costs one write.
func (s *Server) follow(ctx context.Context, st *stream, run *lanefleet.Run, after uint64) {
	s.hub.add(st)
	defer s.hub.remove(st)
	sb := sseBufs.Get().(*sseBuf)
	defer func() {
		if sb.buf.Cap() <= sseBatchMax*2 { // a long run's page is not kept
			sb.buf.Reset()
			sseBufs.Put(sb)
		}
	}()
	buf := &sb.buf   // events not written yet
	pending := false // the last event in buf leads in what follows (leadsIn)
	held := false    // the stream holds events back (see lifecycleHold)
	// put writes what buf holds, flushing it when flush is set. A write
	// that fails ends the stream (the client went or reads too slowly);
	// the run goes on.
	put := func(flush bool) bool {
		if buf.Len() == 0 && !held {
			return true
		}
		err := st.send(buf.Bytes(), s.cfg.WriteTimeout, flush)
		buf.Reset()
		held = false
		if err != nil {
			st.cancel(err)
			return false
		}
		return true
	}
	run.OnCaughtUp(func() {
		if pending && buf.Len() > 0 {
			st.hold(buf.Bytes(), s.lifeHold, s.cfg.WriteTimeout)
			buf.Reset()
			held = true
			return
		}
		put(true)
	})
	for ev, err := range run.Events(ctx) {
		if err != nil {
			var de *events.DecodeError
			if errors.As(err, &de) {
				continue // not an event of the run: a forged or garbled message
			}
			if ctx.Err() == nil {
				s.errorEvent(buf, err, run.ID)
			}
			// Events yielded before the end was seen (a shutdown, say) go
			// out as they did one by one.
			put(true)
			return
		}
		st.mu.Lock()
		st.event = time.Now()
		st.mu.Unlock()
		if ev.Seq <= after {
			continue // the client has it
		}
		if appendEvent(buf, sb.enc, ev) != nil {
			continue
		}
		pending = leadsIn(ev)
		if ev.Terminal() {
			// The final event is the stream's last: on net/http it goes
			// out with the response's end, in one write to the
			// connection instead of two.
			put(false)
			return
		}
		if buf.Len() >= sseBatchMax && !put(true) {
			return
		}
	}
	put(false)
}

// errorEvent says why a followed run's stream ends, as an event the client
// can read after the events it has not been sent yet; a fleet error is
// logged too.
func (s *Server) errorEvent(buf *bytes.Buffer, err error, runID string) {
	p := problemOf(err)
	b, _ := json.Marshal(p)
	buf.WriteString("event: error\ndata: ")
	buf.Write(b)
	buf.WriteString("\n\n")
	if p.Code == CodeFleetError {
		s.log.Warn().Err(err).Str("run", runID).Msg("gateway: following a run failed")
	}
}

// corsLines are the CORS headers set on w, as header lines of a hijacked
// response.
func corsLines(h http.Header) string {
	var sb strings.Builder
	for _, k := range []string{"Access-Control-Allow-Origin", "Access-Control-Expose-Headers", "Vary"} {
		if v := h.Get(k); v != "" {
			sb.WriteString(k + ": " + v + "\r\n")
		}
	}
	return sb.String()
}
