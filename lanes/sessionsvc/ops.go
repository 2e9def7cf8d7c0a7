package sessionsvc

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/sanitize"
	"github.com/lanefleet/lanefleet/sessionfile"
)

// Reply framing, in bytes, beyond the items a reply carries (short keys,
// the largest integer encodings). A history page of one entry is smaller
// than the record that held it, and an events reply of one event smaller
// than the stored message with its headers, so whatever was stored can be
// returned.
const (
	historyFraming = 40 // + the session id
	eventsFraming  = 40
	eventFraming   = 12 // per event
)

// maxSessionID bounds an imported session id (pi writes UUIDs).
const maxSessionID = 256

// historyPage is HistoryReply as the service builds it: entries encoded once,
// as they are measured.
type historyPage struct {
	Entries   []msgpack.RawMessage `msgpack:"e"`
	SessionID string               `msgpack:"s,omitempty"`
	Header    msgpack.RawMessage   `msgpack:"h,omitempty"`
	More      bool                 `msgpack:"m,omitempty"`
	Next      uint64               `msgpack:"n,omitempty"`
	Skip      int                  `msgpack:"k,omitempty"`
}

// history returns the next page of the lane's transcript: whole records
// while they fit, a record split between pages when it does not.
func (s *Service) history(ctx context.Context, r request) (any, error) {
	var q HistoryRequest
	if err := DecodeRequest(r.data, &q); err != nil {
		return nil, badRequest("%v", err)
	}
	if q.Skip < 0 {
		return nil, badRequest("skip %d is negative", q.Skip)
	}
	page := historyPage{Entries: []msgpack.RawMessage{}}
	budget, size := s.budget(), historyFraming
	from, skip := max(q.From, 1), q.Skip
	if q.From == 0 && skip == 0 {
		// The first page starts where the session's transcript does:
		// after a reset (/new, /reset), at its record.
		cur, err := s.cfg.Lanes.Cursor(ctx, r.token)
		if err != nil && !errors.Is(err, kvstore.ErrCorrupt) {
			return nil, err
		}
		from = max(cur.Start, 1)
	}
	deadline := time.Now().Add(walkBudget)
	for {
		rec, seq, ok, err := s.cfg.Lanes.NextRecord(ctx, r.token, from)
		if err != nil {
			if seq != 0 {
				return nil, &Error{Code: CodeInternal, Description: err.Error()}
			}
			return nil, err
		}
		if !ok {
			return page, nil
		}
		if rec.SessionID != "" {
			size += len(rec.SessionID) - len(page.SessionID)
			page.SessionID = rec.SessionID
		}
		if rec.Header != nil && skip == 0 {
			h := *rec.Header
			if !q.Raw {
				h.Raw = nil
			}
			b, err := msgpack.Marshal(&h)
			if err != nil {
				return nil, &Error{Code: CodeInternal, Description: "encode header: " + err.Error()}
			}
			if size+len(b) > budget && len(page.Entries) > 0 {
				page.More, page.Next = true, seq
				return page, nil
			}
			page.Header = b
			size += len(b)
		}
		for i := min(skip, len(rec.Entries)); i < len(rec.Entries); i++ {
			e := &rec.Entries[i]
			if !q.Raw && e.Raw != nil {
				c := *e
				c.Raw = nil // an entry as it is, for a client that did not ask for lines
				e = &c
			}
			b, err := msgpack.Marshal(e)
			if err != nil {
				return nil, &Error{Code: CodeInternal, Description: "encode entry: " + err.Error()}
			}
			if size+len(b) > budget {
				if len(page.Entries) == 0 {
					return nil, &Error{Code: CodeTooLarge, Description: "a transcript entry is larger than the server's max payload"}
				}
				page.More, page.Next, page.Skip = true, seq, i
				return page, nil
			}
			page.Entries = append(page.Entries, b)
			size += len(b)
		}
		from, skip = seq+1, 0
		if time.Now().After(deadline) {
			page.More, page.Next = true, from
			return page, nil
		}
	}
}

// events returns the run's stored events from q.From on, in stream order,
// up to the reply's budget, and the run's state; with q.Lease, while the
// run is running, the lane's lease too.
func (s *Service) events(ctx context.Context, r request) (any, error) {
	var q EventsRequest
	if err := DecodeRequest(r.data, &q); err != nil {
		return nil, badRequest("%v", err)
	}
	reply, err := s.runEvents(ctx, r, q)
	switch {
	case err != nil:
		return nil, err
	case !q.Lease || reply.State != StateRunning:
		return reply, nil
	}
	lease, err := s.cfg.Lanes.Lease(ctx, r.token)
	if err != nil && !errors.Is(err, kvstore.ErrCorrupt) {
		return nil, err
	}
	reply.Lease = LeaseOf(lease, time.Now())
	return reply, nil
}

// runEvents answers an events request (see events).
func (s *Service) runEvents(ctx context.Context, r request, q EventsRequest) (*EventsReply, error) {
	runSeq, err := parseRun(q.Run)
	if err != nil {
		return nil, err
	}
	from := max(q.From, 1)
	subj := events.EventPrefix + r.token + "." + q.Run
	if q.After == 0 && q.From > 1 {
		// A caller that saw events of the run but has no place in the
		// stream yet (its first catch-up) would have the walk read again
		// every event it saw, one read each: the run's last stored event
		// says in one read whether there is anything new.
		if reply, err := s.nothingNew(ctx, subj, from); reply != nil || err != nil {
			return reply, err
		}
	}
	w := &eventWalk{reply: &EventsReply{Events: []StoredEvent{}, State: StateRunning}, budget: s.budget(), size: eventsFraming,
		cursor: max(q.After, 1), seen: q.From > 1} // the caller saw events of the run before
	if err := s.walkEvents(ctx, subj, from, w); err != nil {
		return nil, err
	}
	if w.reply.State == StateDone || w.reply.More {
		return w.reply, nil
	}
	return s.unfinished(ctx, r, q, runSeq, from, w)
}

// eventWalk is an events request's walk of a run's stored events: the
// reply so far and the bytes it holds (size, of budget), the stream
// sequence to read from next (cursor), whether the run has events (seen:
// read, or the caller's), and the newest event read (last).
type eventWalk struct {
	reply        *EventsReply
	budget, size int
	cursor       uint64
	seen         bool
	last         *events.Event
}

// walkEvents reads the run's stored events (subject subj) into the walk's
// reply, those from event from on, until the stream has no more, the run's
// final event (the reply's State is then StateDone), or the reply's bounds
// (More). The reply's Next is the stream sequence to go on from.
func (s *Service) walkEvents(ctx context.Context, subj string, from uint64, w *eventWalk) error {
	reply := w.reply
	deadline := time.Now().Add(walkBudget)
	for {
		raw, err := s.cfg.Events.GetMsg(ctx, w.cursor, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return err
		}
		ct := raw.Header.Get(events.HeaderContentType)
		ev, err := events.DecodeEvent(ct, raw.Data)
		if err != nil {
			// Not an event a worker wrote: nothing a viewer can use.
			s.log.Debug().Err(err).Str("subject", subj).Uint64("stream_seq", raw.Sequence).Msg("lane service: skip undecodable event")
			w.cursor = raw.Sequence + 1
			continue
		}
		w.seen = true
		if w.last == nil || ev.Seq >= w.last.Seq {
			w.last = ev
		}
		if ev.Seq >= from || ev.Terminal() {
			add := len(raw.Data) + eventFraming
			if len(reply.Events) > 0 && (w.size+add > w.budget || len(reply.Events) >= maxEventsPerReply) {
				reply.More = true
				break
			}
			if w.size+add > w.budget {
				s.log.Warn().Str("subject", subj).Uint64("stream_seq", raw.Sequence).Int("bytes", len(raw.Data)).Msg("lane service: event too large to replay")
			} else {
				reply.Events = append(reply.Events, StoredEvent{JSON: events.IsJSON(ct, raw.Data), Data: raw.Data})
				w.size += add
			}
		}
		w.cursor = raw.Sequence + 1
		if ev.Terminal() {
			reply.State = StateDone
			break
		}
		if time.Now().After(deadline) {
			reply.More = true
			break
		}
	}
	reply.Next = w.cursor
	return nil
}

// unfinished completes the reply of a walk that found no final event in
// the stream. A message that waits on the lane has not run; a run whose
// last event ended its attempt (or whose events are gone) may have its
// final only in its committed turn's record: the final's publish failed,
// or the run's events expired.
func (s *Service) unfinished(ctx context.Context, r request, q EventsRequest, runSeq, from uint64, w *eventWalk) (*EventsReply, error) {
	reply := w.reply
	switch {
	case !w.seen:
		state, err := s.waiting(ctx, r.token, runSeq)
		if err != nil || state == StateQueued {
			reply.State = state
			return reply, err
		}
		reply.State = StateUnknown
	case w.last != nil && Open(w.last), w.last == nil && q.Open && q.From > 1:
		// Running: the last event (the one read, or else the caller's
		// own) leaves the run running.
		return reply, nil
	}
	final, err := s.recordFinal(ctx, r, runSeq, q.Run, from, w.last)
	switch {
	case err != nil:
		return nil, err
	case final != nil && w.size+len(final)+eventFraming <= w.budget:
		reply.Events = append(reply.Events, StoredEvent{Data: final})
		reply.State = StateDone
	case final != nil:
		reply.More = true // the next reply has room for it
	}
	return reply, nil
}

// nothingNew returns the reply to a catch-up from event from when the
// run's last stored event is event from-1 and leaves the run running (what
// the walk would answer after reading every event up to it), and nil when
// it cannot tell: no stored event, an undecodable one, another seq, or one
// that ends the run or its attempt. The reply's Next is the stream
// sequence past that event.
func (s *Service) nothingNew(ctx context.Context, subj string, from uint64) (*EventsReply, error) {
	raw, err := s.cfg.Events.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if ev, derr := events.DecodeEvent(raw.Header.Get(events.HeaderContentType), raw.Data); derr != nil || ev.Seq+1 != from || !Open(ev) {
		return nil, nil // the walk decides
	}
	return &EventsReply{Events: []StoredEvent{}, State: StateRunning, Next: raw.Sequence + 1}, nil
}

// recordFinal returns the final event stored with the run's committed turn,
// encoded as a stored event following last, or nil.
func (s *Service) recordFinal(ctx context.Context, r request, runSeq uint64, run string, from uint64, last *events.Event) ([]byte, error) {
	rec, ok, err := s.cfg.Lanes.Record(ctx, r.token, runSeq)
	if err != nil || !ok || rec.RunID != run || len(rec.Final) == 0 {
		return nil, err
	}
	ev, err := events.DecodeEvent(events.ContentMsgpack, rec.Final)
	if err != nil || ev.Data.Result == nil {
		s.log.Warn().Err(err).Str("lane", r.token).Str("run_id", run).Msg("lane service: record holds no usable final event")
		return nil, nil
	}
	ev.V, ev.RunID, ev.SessionKey, ev.Seq, ev.TS = events.Version, run, r.key, from, time.Now().UnixMilli()
	if last != nil {
		ev.Seq, ev.Attempt = max(from, last.Seq+1), last.Attempt
	}
	data, _, err := events.EncodeEvent(ev, false)
	if err != nil {
		return nil, &Error{Code: CodeInternal, Description: "encode final event: " + err.Error()}
	}
	return data, nil
}

// waiting says whether the run's message waits on its lane (queued) or the
// lane has no such run (unknown).
func (s *Service) waiting(ctx context.Context, token string, runSeq uint64) (string, error) {
	raw, err := s.cfg.Inbound.GetMsg(ctx, runSeq, jetstream.WithGetMsgSubject(events.InboundPrefix+token))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return StateUnknown, nil
	case err != nil:
		return "", err
	case raw.Sequence != runSeq:
		return StateUnknown, nil // a later message of the lane: runSeq is not one of its
	}
	return StateQueued, nil
}

// settings returns the lane's stored queue and run settings and the
// session's state (from its newest turn record).
func (s *Service) settings(ctx context.Context, r request) (any, error) {
	if err := DecodeRequest(r.data, &struct{}{}); err != nil {
		return nil, badRequest("%v", err)
	}
	var (
		wg   sync.WaitGroup
		cur  kvstore.Cursor
		cerr error
	)
	wg.Go(func() { cur, cerr = s.cfg.Lanes.Cursor(ctx, r.token) })
	raw, err := s.cfg.Lanes.Settings(ctx, r.token)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	if cerr != nil && !errors.Is(cerr, kvstore.ErrCorrupt) {
		return nil, cerr
	}
	rep := SettingsReply{State: cur.State}
	st, err := events.DecodeSettings(raw)
	if err != nil {
		// The worker runs the session on the defaults (and logs it when it
		// takes the lane): say so, rather than fail the whole request.
		rep.Unreadable = unreadable(err)
		s.log.Debug().Err(err).Str("lane", r.token).Msg("lane service: stored settings unreadable: the session runs on the defaults")
		return rep, nil
	}
	if st != nil {
		rep.Settings, rep.Run = st.Queue(), st.RunSettings()
	}
	return rep, nil
}

// unreadable says what is wrong with a stored settings record.
func unreadable(err error) string {
	if de, ok := errors.AsType[*events.DecodeError](err); ok {
		return de.Detail()
	}
	return err.Error()
}

// importSession stores a pi session file (the request body) as the
// transcript of a new session, holding the lane's lease while it writes.
func (s *Service) importSession(ctx context.Context, r request) (any, error) {
	sc := scanImport(r.data)
	if sc.depth > MaxImportDepth {
		return nil, badRequest("line %d nests %d deep; an imported file may nest %d", sc.deepest, sc.depth, MaxImportDepth)
	}
	if sc.values > MaxImportValues {
		return nil, badRequest("the file holds about %d JSON values; an imported file may hold %d (split the session, or import fewer entries)", sc.values, MaxImportValues)
	}
	// Decoding takes many times a file's size (each value becomes a Go
	// value): one import at a time per worker bounds what imports can
	// take together; the others wait their turn within their timeout.
	select {
	case s.imports <- struct{}{}:
		defer func() { <-s.imports }()
	case <-ctx.Done():
		return nil, &Error{Code: CodeBusy, Description: "another import is running on this worker; try again"}
	}
	f, err := sessionfile.Read(bytes.NewReader(r.data))
	if err != nil {
		return nil, badRequest("not a pi session file: %v", err)
	}
	if len(f.Header.ID) > maxSessionID {
		return nil, badRequest("session id of %d bytes is longer than %d", len(f.Header.ID), maxSessionID)
	}
	// A call the file leaves unanswered is closed as not run: no one
	// could answer it but the sender, who would then approve a call no
	// model of this fleet proposed.
	entries := f.Entries
	closed := sessionfile.CloseCalls(entries, TextImportNotRun, time.Now())
	entries = append(entries, closed...)
	info := kvstore.LeaseInfo{Worker: "import@" + s.cfg.Worker, Acquired: time.Now().UnixMilli()}
	err = s.cfg.Lanes.Import(ctx, r.token, f.Header, info, entries)
	switch {
	case errors.Is(err, kvstore.ErrHeld):
		return nil, &Error{Code: CodeBusy, Description: "a worker is running the session; try again when it is idle"}
	case errors.Is(err, kvstore.ErrNotEmpty):
		return nil, &Error{Code: CodeNotEmpty, Description: "the session already has a transcript"}
	case errors.Is(err, nats.ErrMaxPayload):
		return nil, &Error{Code: CodeTooLarge, Description: "the session is larger than the server's max payload"}
	case err != nil:
		return nil, err
	}
	return ImportReply{SessionID: f.Header.ID, Entries: len(entries), Skipped: len(f.Skipped), Closed: len(closed)}, nil
}

// TextImportNotRun is the error result an import gives each tool call the
// file's last assistant message left without a result, in the words of the
// runtime's synthetic results.
const TextImportNotRun = sanitize.MissingToolResultText + " The session was imported with this call unanswered: it was not run."

// MaxImportDepth bounds the nesting of objects and arrays in an imported
// line: pi's entries nest a few levels (entry, message, content, block,
// arguments), and whatever is stored must decode again everywhere it is
// read.
const MaxImportDepth = 64

// MaxImportValues bounds the JSON values of an imported file (as
// scanImport counts them). Decoded, a value takes tens to hundreds of
// bytes whatever its size in the file (an empty object, 3 bytes, becomes a
// map), so this, not the file's size, bounds an import's memory: about
// 200 MB at most. A real session of the largest size a request carries
// (8 MiB, mostly text) holds well under a million.
const MaxImportValues = 1 << 20

// importScan is what scanImport finds in a file.
type importScan struct {
	deepest int // the 1-based number of the most deeply nested line
	depth   int // its nesting depth
	values  int // lines, containers, members and elements: about the values a decode makes
}

// scanImport scans JSON Lines data without decoding it (strings skipped,
// each line on its own) for its deepest line and the number of values
// decoding it would make: every line, object and array, and every ':'
// and ',' (a member or an element).
func scanImport(data []byte) importScan {
	var sc importScan
	n, d := 1, 0
	inString, escaped := false, false
	sc.values = 1
	for _, c := range data {
		switch {
		case c == '\n':
			n, d, inString, escaped = n+1, 0, false, false
			sc.values++
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString && c == '"':
			inString = false
		case inString:
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			sc.values++
			if d++; d > sc.depth {
				sc.deepest, sc.depth = n, d
			}
		case c == '}' || c == ']':
			d--
		case c == ':' || c == ',':
			sc.values++
		}
	}
	return sc
}

// backlog counts the lane's messages after its last committed turn: the
// subject's stored messages less the processed ones not yet purged, which
// it steps over from the front (usually none or a few: an owner purges
// them when it releases the lane).
func (s *Service) backlog(ctx context.Context, r request) (any, error) {
	if err := DecodeRequest(r.data, &struct{}{}); err != nil {
		return nil, badRequest("%v", err)
	}
	subj := events.InboundPrefix + r.token
	var rep BacklogReply
	cur, err := s.cfg.Lanes.Cursor(ctx, r.token)
	if err != nil && !errors.Is(err, kvstore.ErrCorrupt) {
		return nil, err
	}
	rep.Processed = cur.Seq
	lease, err := s.cfg.Lanes.Lease(ctx, r.token)
	if err != nil && !errors.Is(err, kvstore.ErrCorrupt) {
		return nil, err
	}
	if rep.Lease = LeaseOf(lease, time.Now()); lease.Held {
		rep.Holder, rep.HeldSince = rep.Lease.Worker, rep.Lease.Since
	}
	first, err := s.cfg.Inbound.GetMsg(ctx, cur.Seq+1, jetstream.WithGetMsgSubject(subj))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return rep, nil
	}
	if err != nil {
		return nil, err
	}
	rep.OldestRun, rep.OldestAt = strconv.FormatUint(first.Sequence, 10), first.Time.UnixMilli()
	info, err := s.cfg.Inbound.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return nil, err
	}
	stored := int(info.State.Subjects[subj])
	processed := 0
	deadline := time.Now().Add(walkBudget)
	for seq := uint64(1); ; processed++ {
		if processed >= MaxBacklogWalk || time.Now().After(deadline) {
			rep.More = true
			break
		}
		m, err := s.cfg.Inbound.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, err
		}
		if m.Sequence > cur.Seq {
			break
		}
		seq = m.Sequence + 1
	}
	rep.Waiting = max(stored-processed, 1) // the oldest waiting message was found
	return rep, nil
}
