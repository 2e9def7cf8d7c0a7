// Package lanefleet is the Go client of a Lanefleet fleet: send a message to a
// session's lane, follow the run's events as they stream, and read the
// session's transcript.
//
//	c, err := lanefleet.Connect("nats://127.0.0.1:4222")
//	run, err := c.Send(ctx, "alice", "hello")
//	for ev, err := range run.Events(ctx) { … }
package lanefleet

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes/queue"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/sessionfile"
)

// ErrNoFleet means the NATS server has no Lanefleet streams: no worker has
// run against it yet.
var ErrNoFleet = errors.New("lanefleet: no fleet on this NATS server (start a worker first)")

// Client talks to a fleet over one NATS connection.
type Client struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	owns bool
}

// New returns a client using an existing connection.
func New(nc *nats.Conn) (*Client, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("lanefleet: %w", err)
	}
	return &Client{nc: nc, js: js}, nil
}

// Connect connects to NATS and returns a client that owns the connection.
func Connect(url string, opts ...nats.Option) (*Client, error) {
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("lanefleet-client")}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("lanefleet: connect to %s: %w", url, err)
	}
	c, err := New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.owns = true
	return c, nil
}

// Close closes the connection if the client opened it.
func (c *Client) Close() {
	if c.owns {
		c.nc.Close()
	}
}

type sendOptions struct {
	in     events.Inbound
	asJSON bool
}

// SendOption configures Send.
type SendOption func(*sendOptions) error

// WithMode sets the queue mode of the message (followup, collect, steer,
// steer-backlog, interrupt, reject, rollback).
func WithMode(mode string) SendOption {
	return func(o *sendOptions) error { o.in.Mode = mode; return nil }
}

// WithModel asks for a model, "provider/model-id".
func WithModel(ref string) SendOption {
	return func(o *sendOptions) error { o.in.Model = ref; return nil }
}

// WithThinking sets the thinking level (off, minimal, low, medium, high, xhigh).
func WithThinking(level string) SendOption {
	return func(o *sendOptions) error { o.in.Thinking = level; return nil }
}

// WithImage attaches an image.
func WithImage(mimeType string, data []byte) SendOption {
	return func(o *sendOptions) error {
		o.in.Images = append(o.in.Images, events.Image{MimeType: mimeType, Data: base64.StdEncoding.EncodeToString(data)})
		return nil
	}
}

// WithMessageID sets the message id used for de-duplication: sending the same
// id again within the dedupe window returns the first message's run.
func WithMessageID(id string) SendOption {
	return func(o *sendOptions) error { o.in.ID = id; return nil }
}

// WithTools offers client tools to the model for this run: tools the client
// executes itself. When the model calls one, the run ends with
// Meta.StopReason "tool_calls" and the calls in Meta.PendingToolCalls
// (arguments as JSON text); the client runs them and answers in its next
// message to the session with WithToolResults, and the model goes on from
// there. Offer the same tools again with that message (and with every
// later one while the conversation may use them): tools are per message,
// and a call to a tool the run does not know is dropped from the history
// the model sees. Names are 1-64 of A-Z a-z 0-9 _ -; Parameters is a JSON
// Schema object.
func WithTools(tools ...events.ClientTool) SendOption {
	return func(o *sendOptions) error { o.in.Tools = append(o.in.Tools, tools...); return nil }
}

// WithToolResults answers the pending client tool calls of the session's
// previous run, one result per call id (IsError for a call that failed).
// The message's text may then be empty.
func WithToolResults(results ...events.ToolResult) SendOption {
	return func(o *sendOptions) error { o.in.ToolResults = append(o.in.ToolResults, results...); return nil }
}

// WithJSON sends the message as JSON instead of msgpack; the run's events are
// then published as JSON too.
func WithJSON() SendOption {
	return func(o *sendOptions) error { o.asJSON = true; return nil }
}

// Run is a sent message's run.
type Run struct {
	Session   string
	ID        string // run id: the message's inbound stream sequence
	Seq       uint64
	Duplicate bool // the message id was seen before; this is the earlier run
	c         *Client
}

// Send publishes text to a session's lane and returns its run. The message is
// validated before it is sent; a *events.DecodeError says what is wrong.
func (c *Client) Send(ctx context.Context, session, text string, opts ...SendOption) (*Run, error) {
	o := sendOptions{in: events.Inbound{Text: text}}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.in.ID == "" {
		o.in.ID = newID()
	}
	if _, err := events.KeyToken(session); err != nil {
		return nil, fmt.Errorf("lanefleet: session %q: %w", session, err)
	}
	if err := o.in.Validate(); err != nil {
		return nil, err
	}
	return c.publish(ctx, session, &o.in, o.asJSON)
}

func (c *Client) publish(ctx context.Context, session string, in *events.Inbound, asJSON bool) (*Run, error) {
	subj, err := events.InboundSubject(session)
	if err != nil {
		return nil, fmt.Errorf("lanefleet: session %q: %w", session, err)
	}
	data, ct, err := events.EncodeInbound(in, asJSON)
	if err != nil {
		return nil, fmt.Errorf("lanefleet: encode: %w", err)
	}
	m := nats.NewMsg(subj)
	m.Data = data
	m.Header.Set(events.HeaderContentType, ct)
	ack, err := c.js.PublishMsg(ctx, m, jetstream.WithMsgID(in.ID))
	if err != nil {
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
			return nil, ErrNoFleet
		}
		return nil, fmt.Errorf("lanefleet: publish: %w", err)
	}
	return &Run{Session: session, ID: strconv.FormatUint(ack.Sequence, 10), Seq: ack.Sequence, Duplicate: ack.Duplicate, c: c}, nil
}

// SetQueueSettings stores a session's queue settings: what happens to its
// messages that name no mode (Mode), and for collect mode the debounce,
// cap and drop policy (old, new or summarize). Only the fields set change;
// unset ones keep their stored value or the default (mode followup;
// debounce 1 s, cap 20, drop summarize). The change is a message of the
// session's lane: it applies to every message sent after it, once the
// messages sent before it have been taken; Wait on the returned run to know
// it was applied (its result's text describes the settings in force).
func (c *Client) SetQueueSettings(ctx context.Context, session string, s queue.Overrides) (*Run, error) {
	return c.sendSettings(ctx, session, QueueSettingsOf(s))
}

// ResetQueueSettings clears a session's stored queue settings, in lane order
// like SetQueueSettings.
func (c *Client) ResetQueueSettings(ctx context.Context, session string) (*Run, error) {
	return c.sendSettings(ctx, session, &events.QueueSettings{Reset: true})
}

func (c *Client) sendSettings(ctx context.Context, session string, q *events.QueueSettings) (*Run, error) {
	in := events.Inbound{ID: newID(), QueueSettings: q}
	if err := in.Validate(); err != nil {
		return nil, err
	}
	return c.publish(ctx, session, &in, false)
}

// QueueSettings returns a session's stored queue settings (zero when none
// are stored); queue.Resolve(s) gives the values in force.
func (c *Client) QueueSettings(ctx context.Context, session string) (queue.Overrides, error) {
	tok, err := events.KeyToken(session)
	if err != nil {
		return queue.Overrides{}, fmt.Errorf("lanefleet: session %q: %w", session, err)
	}
	l, err := c.lanes(ctx)
	if err != nil {
		return queue.Overrides{}, err
	}
	raw, err := l.Settings(ctx, tok)
	if err != nil || raw == nil {
		return queue.Overrides{}, err
	}
	var q events.QueueSettings
	if err := json.Unmarshal(raw, &q); err != nil {
		return queue.Overrides{}, fmt.Errorf("lanefleet: stored settings of %q: %w", session, err)
	}
	return OverridesOf(&q), nil
}

// QueueSettingsOf returns queue settings in their wire form (what a
// settings message carries and a lane stores).
func QueueSettingsOf(o queue.Overrides) *events.QueueSettings {
	q := &events.QueueSettings{Mode: string(o.Mode), Cap: o.Cap, Drop: string(o.Drop)}
	if o.Debounce != nil {
		ms := o.Debounce.Milliseconds()
		q.DebounceMs = &ms
	}
	return q
}

// OverridesOf returns queue settings in their wire form (nil = none) as a
// layer for queue.Resolve.
func OverridesOf(q *events.QueueSettings) queue.Overrides {
	if q == nil {
		return queue.Overrides{}
	}
	o := queue.Overrides{Cap: q.Cap}
	o.Mode, _ = queue.ParseMode(q.Mode)
	o.Drop, _ = queue.ParseDropPolicy(q.Drop)
	if q.DebounceMs != nil {
		d := time.Duration(*q.DebounceMs) * time.Millisecond
		o.Debounce = &d
	}
	return o
}

// Run returns a handle on an existing run, e.g. to replay its events.
func (c *Client) Run(session, runID string) *Run {
	seq, _ := strconv.ParseUint(runID, 10, 64)
	return &Run{Session: session, ID: runID, Seq: seq, c: c}
}

// Follow returns the run runID of the same session, e.g. the run named by
// Meta.MergedInto of a message that collect mode merged into it.
func (r *Run) Follow(runID string) *Run { return r.c.Run(r.Session, runID) }

// Events yields the run's events from its first one, in order and each once,
// and stops after the final event. Joining late replays what was missed.
// Iteration ends early with an error when ctx is done.
//
// If the worker running the run dies (or the attempt fails), the attempt
// ends with a lifecycle "aborted" event and the next one starts with
// "restart": its assistant events' Text starts over; events of an older
// attempt that arrive after a newer one started (from a worker that lost the
// lane) are skipped. A message that did not
// get a turn of its own ends with a lifecycle event saying why (merged,
// error) and its final event.
func (r *Run) Events(ctx context.Context) iter.Seq2[*events.Event, error] {
	return func(yield func(*events.Event, error) bool) {
		subj, err := events.EventSubject(r.Session, r.ID)
		if err != nil {
			yield(nil, err)
			return
		}
		stream, err := r.c.js.Stream(ctx, events.EventStream)
		if err != nil {
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				err = ErrNoFleet
			}
			yield(nil, err)
			return
		}
		cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
		if err != nil {
			yield(nil, fmt.Errorf("lanefleet: follow run %s: %w", r.ID, err))
			return
		}
		msgs, err := cons.Messages(jetstream.PullMaxMessages(500))
		if err != nil {
			yield(nil, fmt.Errorf("lanefleet: follow run %s: %w", r.ID, err))
			return
		}
		defer msgs.Stop()
		attempt := 0 // the newest attempt seen
		for {
			m, err := msgs.Next(jetstream.NextContext(ctx))
			if err != nil {
				if ctx.Err() != nil {
					err = fmt.Errorf("lanefleet: follow run %s: %w", r.ID, ctx.Err())
				}
				yield(nil, err)
				return
			}
			ev, err := events.DecodeEvent(m.Headers().Get(events.HeaderContentType), m.Data())
			if err != nil {
				if !yield(nil, err) {
					return
				}
				continue
			}
			// A worker that lost the lane may publish for a moment after
			// the next owner started a new attempt: its late events are
			// not part of the run any more.
			if ev.Attempt > 0 && ev.Attempt < attempt && !ev.Terminal() {
				continue
			}
			attempt = max(attempt, ev.Attempt)
			if !yield(ev, nil) || ev.Terminal() {
				return
			}
		}
	}
}

// RunError is a run that ended with an error result.
type RunError struct {
	Kind    string
	Message string
	Result  *events.Result
}

func (e *RunError) Error() string { return "lanefleet: run failed: " + e.Kind + ": " + e.Message }

// Wait follows the run to its end and returns its result. A run that ended
// in error returns the result and a *RunError. A message merged into another
// run by collect mode returns that run's result.
func (r *Run) Wait(ctx context.Context) (*events.Result, error) {
	for ev, err := range r.Events(ctx) {
		if err != nil {
			return nil, err
		}
		if ev.Terminal() {
			res := ev.Data.Result
			if res == nil {
				res = &events.Result{}
			}
			if res.Meta.Error != nil {
				return res, &RunError{Kind: res.Meta.Error.Kind, Message: res.Meta.Error.Message, Result: res}
			}
			if into := res.Meta.MergedInto; into != "" && into != r.ID {
				// A collect turn answered this message with others: its
				// result is that run's.
				return r.c.Run(r.Session, into).Wait(ctx)
			}
			return res, nil
		}
	}
	return nil, fmt.Errorf("lanefleet: run %s: event stream ended without a final event", r.ID)
}

// History returns a session's transcript as pi session entries.
func (c *Client) History(ctx context.Context, session string) ([]message.Entry, error) {
	recs, err := c.records(ctx, session)
	if err != nil {
		return nil, err
	}
	return kvstore.Entries(recs), nil
}

// Export writes a session's transcript as a pi session file (JSON Lines: a
// version 3 session header, then every entry), the format pi and OpenClaw
// read.
func (c *Client) Export(ctx context.Context, session string, w io.Writer) error {
	recs, err := c.records(ctx, session)
	if err != nil {
		return err
	}
	entries := kvstore.Entries(recs)
	header := message.Entry{Type: message.EntrySession, Version: message.SessionVersion,
		Timestamp: time.Now().UTC().Format("2006-01-02T15:04:05.000Z")}
	for _, r := range recs {
		if r.SessionID != "" {
			header.ID = r.SessionID
		}
	}
	if len(entries) > 0 && entries[0].Timestamp != "" {
		header.Timestamp = entries[0].Timestamp
	}
	if header.ID == "" {
		header.ID = sessionfile.NewSessionID()
	}
	return sessionfile.WriteEntries(w, append([]message.Entry{header}, entries...))
}

// Import reads a pi/OpenClaw session file (any version; it is migrated, and
// malformed lines are skipped) and stores it as the transcript of session,
// which must be new. Later turns continue the imported conversation under the
// file's session id.
func (c *Client) Import(ctx context.Context, session string, r io.Reader) error {
	tok, err := events.KeyToken(session)
	if err != nil {
		return fmt.Errorf("lanefleet: session %q: %w", session, err)
	}
	f, err := sessionfile.Read(r)
	if err != nil {
		return fmt.Errorf("lanefleet: import: %w", err)
	}
	l, err := c.lanes(ctx)
	if err != nil {
		return err
	}
	err = l.Import(ctx, tok, f.Header.ID, kvstore.LeaseInfo{Worker: "import", Acquired: time.Now().UnixMilli()}, f.Entries)
	switch {
	case errors.Is(err, kvstore.ErrHeld):
		return fmt.Errorf("lanefleet: import into %q: a worker is running the session; try again when it is idle", session)
	case errors.Is(err, kvstore.ErrNotEmpty):
		return fmt.Errorf("lanefleet: import into %q: the session already has a transcript", session)
	}
	return err
}

// ActiveRun is a run some worker is running now.
type ActiveRun = kvstore.RunInfo

// ActiveRuns lists the runs the fleet's workers are running now: session,
// run id, worker, attempt, start time and phase. Entries of a worker that
// died vanish after the registry's TTL (default 1 hour).
func (c *Client) ActiveRuns(ctx context.Context) ([]ActiveRun, error) {
	runs, err := kvstore.BindRuns(ctx, c.js, "")
	if err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, ErrNoFleet
		}
		return nil, err
	}
	list, err := runs.List(ctx)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(list, func(a, b ActiveRun) int { return cmp.Compare(a.StartedAt, b.StartedAt) })
	return list, nil
}

func (c *Client) lanes(ctx context.Context) (*kvstore.Lanes, error) {
	l, err := kvstore.Bind(ctx, c.js, "")
	if err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, ErrNoFleet
		}
		return nil, err
	}
	return l, nil
}

func (c *Client) records(ctx context.Context, session string) ([]kvstore.Record, error) {
	tok, err := events.KeyToken(session)
	if err != nil {
		return nil, fmt.Errorf("lanefleet: session %q: %w", session, err)
	}
	l, err := c.lanes(ctx)
	if err != nil {
		return nil, err
	}
	return l.Records(ctx, tok)
}

func newID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return strings.ToLower(hex.EncodeToString(b))
}
