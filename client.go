// Package lanefleet is the Go client of a Lanefleet fleet: send a message to a
// session's lane, follow the run's events as they stream, and read the
// session's transcript.
//
//	c, err := lanefleet.Connect("nats://127.0.0.1:4222")
//	run, err := c.Send(ctx, "alice", "hello")
//	for ev, err := range run.Events(ctx) { … }
//
// The client needs no access to the JetStream API or the fleet's buckets: it
// publishes on agent.in.<lane>, subscribes to agent.ev.<lane>.* and asks
// the workers' lane service (agent.svc.<lane>.<op>) for the rest, so a NATS
// user allowed only its own sessions' subjects (and its own inbox prefix,
// see Credentials) can use it. ActiveRuns is the exception: it reads the
// runs bucket, which only an admin may.
package lanefleet

import (
	"cmp"
	"container/list"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	neturl "net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/backoff"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/permission"
	"github.com/lanefleet/lanefleet/sessionfile"
	"github.com/lanefleet/lanefleet/tracing"
)

// Errors callers branch on (errors.Is); the client wraps them with what it
// was doing.
var (
	// ErrNoFleet means no fleet answers on this NATS server: no stream
	// stores the session's messages and no worker serves the lane
	// service (start a worker first).
	ErrNoFleet = errors.New("lanefleet: no fleet on this NATS server (start a worker first)")
	// ErrUnknownRun means the session has no such run: no stored event, no
	// waiting message, no committed turn (a wrong id, or its events expired).
	ErrUnknownRun = errors.New("lanefleet: unknown run")
	// ErrSessionBusy means a worker is running the session (Import).
	ErrSessionBusy = errors.New("lanefleet: a worker is running the session; try again when it is idle")
	// ErrNotEmpty means the session already has a transcript (Import).
	ErrNotEmpty = errors.New("lanefleet: the session already has a transcript")
	// ErrTooLarge means a message or a stored item does not fit the NATS
	// server's max payload.
	ErrTooLarge = errors.New("lanefleet: larger than the NATS server's max payload")
	// ErrPermission means the NATS server refused a subject to this
	// connection's user (see the roles in docs/security.md).
	ErrPermission = errors.New("lanefleet: permission denied")
	// ErrLaneFull means the session's lane holds as many messages as the
	// fleet lets one session queue (worker --lane-max-messages,
	// --lane-max-bytes): it refuses the session's new messages until its
	// runs have taken some. Other sessions are not affected.
	ErrLaneFull = errors.New("lanefleet: the session's lane is full")
	// ErrUnacknowledged means a message went out but its stream's
	// acknowledgement cannot reach this connection (the server refused
	// the reply inbox only once the message was sent): it may be stored
	// and run. Sending it again with the same message id (WithMessageID)
	// within the stream's 2-minute de-duplication window stores no second
	// copy and returns its run.
	ErrUnacknowledged = errors.New("lanefleet: sent, but its acknowledgement cannot reach this connection")
)

// Client talks to a fleet over one NATS connection.
type Client struct {
	nc   *nats.Conn
	owns bool

	mu    sync.Mutex
	lanes map[string]*laneSub // event subscriptions by lane token
	// refusedLanes are the lanes whose events the server refused this
	// client (see laneSub.refuse).
	refusedLanes map[string]bool
	// The lane subscriptions deliver into evs (made with the first), read
	// by one dispatcher goroutine while nsubs > 0 (see dispatch).
	evs          chan *nats.Msg
	subLanes     sync.Map      // *nats.Subscription → its *laneSub
	nsubs        int           // lane subscriptions on the connection
	stopDispatch chan struct{} // closed when nsubs drops to 0; nil while no dispatcher runs
	dispatched   chan struct{} // closed when the latest dispatcher returned
	// kept are the feeds Send opened that nobody claimed yet, oldest
	// first, at most keepMax (0: maxKept).
	kept    list.List
	keepMax int
	replies replyMux // see requestMsg
}

// New returns a client using an existing connection.
func New(nc *nats.Conn) (*Client, error) {
	if nc == nil {
		return nil, errors.New("lanefleet: no connection")
	}
	return &Client{nc: nc}, nil
}

// Connect connects to NATS and returns a client that owns the connection.
// Credentials.Options gives the options for a server that authenticates.
//
// A connection that authenticates with a user name and password (options
// or URL) and sets no inbox prefix gets the user's own, _INBOX_<user>, as
// the worker derives its own and as the fleet's permissions grant it
// (package permission): a sender's user may subscribe to no other inbox,
// so with NATS's _INBOX every request was refused. nats.CustomInboxPrefix
// (Credentials.InboxPrefix, NATS_INBOX_PREFIX) sets another.
func Connect(url string, opts ...nats.Option) (*Client, error) {
	if prefix := derivedInboxPrefix(url, opts); prefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(prefix))
	}
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("lanefleet-client")}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("lanefleet: connect to %s: %w", redactURL(url), err)
	}
	c, err := New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.owns = true
	return c, nil
}

// Close closes the connection if the client opened it; on a connection
// given to New it ends the client's reply subscription (a request after
// Close makes a new one). Requests waiting for a reply on it end with
// nats.ErrConnectionClosed (not those on an inbox of their own, after the
// server refused the shared one: they wait out their timeout). The feeds Send opened that nobody followed
// end, with their lane subscriptions (their runs, followed later, start
// with a catch-up).
func (c *Client) Close() {
	c.mu.Lock()
	var kept []keptFeed
	for e := c.kept.Front(); e != nil; e = e.Next() {
		k := e.Value.(keptFeed)
		k.f.kept = nil
		kept = append(kept, k)
	}
	c.kept.Init()
	c.mu.Unlock()
	for _, k := range kept {
		k.r.expire(k.f)
	}
	c.replies.close()
	if c.owns {
		c.nc.Close()
	}
}

type sendOptions struct {
	in       events.Inbound
	asJSON   bool
	noFollow bool
}

// SendOption configures Send.
type SendOption func(*sendOptions) error

// WithMode sets the queue mode of the message (followup, collect, steer,
// steer-backlog, interrupt, reject, rollback).
func WithMode(mode string) SendOption {
	return func(o *sendOptions) error { o.in.Mode = mode; return nil }
}

// WithHeartbeat marks the message as a heartbeat, a scheduled check-in:
// it runs when the session is idle, and is dropped (a *RunError of kind
// dropped) when it arrives while the session is busy instead of queueing
// behind the running turn. Without text it runs on the heartbeat prompt
// (follow HEARTBEAT.md); a reply that is only HEARTBEAT_OK is suppressed:
// the result has no payloads and Meta.HeartbeatOK set.
func WithHeartbeat() SendOption {
	return func(o *sendOptions) error { o.in.Heartbeat = true; return nil }
}

// WithModel asks for a model, "provider/model-id".
func WithModel(ref string) SendOption {
	return func(o *sendOptions) error { o.in.Model = ref; return nil }
}

// WithThinking sets the thinking level (off, minimal, low, medium, high, xhigh).
func WithThinking(level string) SendOption {
	return func(o *sendOptions) error { o.in.Thinking = level; return nil }
}

// WithAuthProfile pins the message's turn to one auth profile (an id of
// the worker's auth-profiles file, e.g. "anthropic:work"); it wins over the
// session's stored profile and the one its last turn used. The turn ends
// with an invalid_input *RunError unless the worker allows pinning it
// (worker --allow-auth-pins) and the profile is not disabled.
func WithAuthProfile(id string) SendOption {
	return func(o *sendOptions) error { o.in.AuthProfile = id; return nil }
}

// WithImage attaches an image.
func WithImage(mimeType string, data []byte) SendOption {
	return func(o *sendOptions) error {
		o.in.Images = append(o.in.Images, events.Image{MimeType: mimeType, Data: base64.StdEncoding.EncodeToString(data)})
		return nil
	}
}

// WithMessageID sets the message id used for de-duplication on the
// session's lane (default: a random one): a message sent again to the
// same session with the same id within the dedupe window (2 minutes) is
// not run again; its run ends pointing at the first one's
// (Meta.MergedInto), whose result Wait returns. Another session's
// messages cannot use the id first: ids are the session's own.
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

// WithoutFollow sends without subscribing to the session's events first:
// a plain publish, for a caller that will not follow the run (or not
// within seconds). Following the run later still works; it starts with a
// request for the stored events, as for a run joined late. A client that
// sends to many sessions it does not follow saves a subscription (and its
// server-side work) per Send.
func WithoutFollow() SendOption {
	return func(o *sendOptions) error { o.noFollow = true; return nil }
}

// Run is a sent message's run.
type Run struct {
	Session string
	ID      string // run id: the message's inbound stream sequence
	Seq     uint64
	c       *Client

	waitAfter  time.Duration
	onWait     func(Wait)
	onCaughtUp func()
	// live is the feed Send opened before it published, until the first
	// Events takes it or it expires (claimWithin).
	live atomic.Pointer[feed]
}

// Send publishes text to a session's lane and returns its run. The message is
// validated before it is sent; a *events.DecodeError says what is wrong.
//
// A publish that fails for a reason that passes (a stream leader election,
// a timeout) is retried for up to a minute within ctx, as the same publish
// (a Nats-Msg-Id of its own, random, which the stream de-duplicates and
// nobody else can know) carrying the same message id (Lanefleet-Msg-Id,
// which the session's lane de-duplicates: WithMessageID). ErrNoFleet means
// no stream stores the session's messages and no worker answers;
// ErrPermission that the connection's user may not send to the session
// or receive its acknowledgement (then nothing was sent);
// ErrUnacknowledged (with ErrPermission) that it went out but its
// acknowledgement cannot come: do not send it as a new message; ErrTooLarge
// that the message exceeds the server's max payload or the fleet's;
// ErrLaneFull that the session has as many messages queued as the fleet
// allows one session (the error says how many). A stream that refuses the
// message (a full store) is an error at once.
//
// Send subscribes to the session's events before it publishes, so following
// the run (Events, Wait) within 10 s starts from its live events and asks
// the lane service for stored ones only if some go missing; the
// subscription ends when the following does, or after those 10 s (or
// sooner, once the client holds 4,096 newer runs nobody follows yet).
// WithoutFollow sends without it.
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
	return c.publish(ctx, session, &o.in, o.asJSON, !o.noFollow)
}

// Retry bounds of Send.
const (
	publishTimeout  = 5 * time.Second // one attempt
	sendRetryBudget = time.Minute     // all attempts
	noStreamConfirm = 2 * time.Second // no stream answers this long: ask the lane service whether a fleet exists
)

// publish sends in to the session's lane; with follow it subscribes to the
// lane's events first and opens the run's feed (see Send).
func (c *Client) publish(ctx context.Context, session string, in *events.Inbound, asJSON, follow bool) (*Run, error) {
	tok, err := events.KeyToken(session)
	if err != nil {
		return nil, fmt.Errorf("lanefleet: session %q: %w", session, err)
	}
	subj := events.InboundPrefix + tok
	data, ct, err := events.EncodeInbound(in, asJSON)
	if err != nil {
		return nil, fmt.Errorf("lanefleet: encode: %w", err)
	}
	// The run's events are seen from the first one when the lane's
	// subscription is in place before the message is stored: the server
	// takes the subscription before the publish that follows it on this
	// connection.
	var (
		before error
		lane   *laneSub
	)
	if follow {
		before = c.nc.LastError()
		if lane, err = c.holdLane(tok); err == nil {
			lane.sendStarts()
			defer func() { lane.sendEnds(); lane.release() }()
		}
	}
	start := time.Now()
	var noStreamSince time.Time
	// The publish's own id: the stream's de-duplication (stream-wide)
	// keeps one copy of a retried publish. Random, so no other sender can
	// use it first; in.ID, which a caller may choose, is de-duplicated on
	// the lane only (Lanefleet-Msg-Id).
	publishID := newID()
	b := backoff.Counter{Policy: callBackoff}
	for {
		m := nats.NewMsg(subj)
		m.Data = data
		m.Header.Set(events.HeaderContentType, ct)
		m.Header.Set(events.HeaderMsgID, publishID)
		m.Header.Set(events.HeaderLaneMsgID, in.ID)
		tracing.Inject(ctx, m.Header) // the caller's trace continues into the turn
		ack, err := c.publishOnce(ctx, m)
		if err == nil {
			// A duplicate ack is our own earlier attempt: our message.
			r := &Run{Session: session, ID: strconv.FormatUint(ack.Sequence, 10), Seq: ack.Sequence, c: c}
			if lane != nil {
				c.followFromLane(r, lane, before)
			}
			return r, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("lanefleet: send to %q: %w", session, context.Cause(ctx))
		}
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			// Nothing was stored: no stream listens on the subject. A
			// cluster electing a leader answers again within seconds; a
			// server without a fleet never does.
			if noStreamSince.IsZero() {
				noStreamSince = time.Now()
			} else if time.Since(noStreamSince) >= noStreamConfirm {
				if !c.workerAnswers(ctx, tok) {
					return nil, fmt.Errorf("%w: no stream stores %s and no worker answers", ErrNoFleet, subj)
				}
				noStreamSince = time.Now()
			}
		case isTimeout(err), c.reconnecting(err):
			// The stream may hold it already: the retry, the same
			// publish, is de-duplicated.
		case transientPubAck(err):
		default:
			return nil, c.sendFailed(ctx, err, session, in.ID, len(data))
		}
		if time.Since(start) > sendRetryBudget {
			return nil, fmt.Errorf("lanefleet: send to %q: still failing after %v: %w", session, sendRetryBudget, err)
		}
		if err := b.Wait(ctx); err != nil {
			return nil, fmt.Errorf("lanefleet: send to %q: %w", session, err)
		}
	}
}

// followFromLane has r follow its events from the lane subscription held
// before the publish, unless the server refused that subscription.
func (c *Client) followFromLane(r *Run, lane *laneSub, before error) {
	// The publish's flush came after the subscription: a refused one is
	// reported by now.
	if c.denied(before, "Subscription to", lane.prefix+"*") != nil {
		lane.refuse()
	} else if !lane.refused.Load() {
		// Every attempt came after the subscription: it holds the run's
		// events from the start.
		f := lane.open(r.ID, unclaimedBuffer, true)
		r.live.Store(f)
		f.expireUnclaimed(r)
	}
}

// sendFailed is the error of a publish that retrying does not mend: one
// that may have been stored (ErrUnacknowledged, with how to send it again
// safely), a permission, a message too large, a full lane, or else the
// error as it came.
func (c *Client) sendFailed(ctx context.Context, err error, session, msgID string, size int) error {
	if se := (*sentError)(nil); errors.As(err, &se) {
		return fmt.Errorf("%w: the message to %q (message id %s) may be stored and run: %w; do not send it as a new message: "+
			"sent again with the same id once the inbox is fixed (WithMessageID, publisher send --id %s) within 2 minutes, it is not stored twice and its run id comes back",
			ErrUnacknowledged, session, msgID, se.err, msgID)
	}
	if errors.Is(err, ErrPermission) {
		return fmt.Errorf("%w (send to session %q)", err, session)
	}
	if errors.Is(err, nats.ErrMaxPayload) || refusedAs(err, "message size exceeds maximum allowed") {
		return fmt.Errorf("%w: the message to %q is %d bytes", ErrTooLarge, session, size)
	}
	if refusedAs(err, "maximum messages per subject exceeded") {
		return c.laneFull(ctx, session)
	}
	return fmt.Errorf("lanefleet: send to %q: %w", session, err)
}

// pubAckError is the error of a refused JetStream publish.
type pubAckError struct{ jetstream.APIError }

func (e *pubAckError) Error() string {
	return fmt.Sprintf("stream refused the message: %s (code %d, error code %d)", e.Description, e.Code, e.ErrorCode)
}

// publishOnce publishes m to its stream and returns the stream's ack.
func (c *Client) publishOnce(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
	data, err := c.requestMsg(ctx, m, publishTimeout)
	if err != nil {
		return nil, err
	}
	var resp struct {
		jetstream.PubAck
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, fmt.Errorf("malformed stream ack: %w", err)
	}
	if resp.Error != nil {
		return nil, &pubAckError{*resp.Error}
	}
	if resp.Stream == "" {
		return nil, errors.New("malformed stream ack: no stream")
	}
	return &resp.PubAck, nil
}

// refusedAs reports whether err is the stream's refusal with description
// what.
func refusedAs(err error, what string) bool {
	var e *pubAckError
	return errors.As(err, &e) && e.Description == what
}

// laneFull is the error of a message the session's full lane refused: it
// says how many messages wait there (asked of the lane service) and what
// to do.
func (c *Client) laneFull(ctx context.Context, session string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second) // a lane service on a busy fleet; a refusal is rare
	defer cancel()
	b, err := c.Backlog(ctx, session)
	if err != nil || b.Waiting == 0 {
		return fmt.Errorf("%w: session %q has as many messages queued as the fleet allows one session; send again once its runs have taken some", ErrLaneFull, session)
	}
	n := strconv.Itoa(b.Waiting)
	if b.More {
		n = "up to " + n
	}
	return fmt.Errorf("%w: %s messages of session %q wait for their turns, as many as the fleet allows one session; send again once its runs have taken some", ErrLaneFull, n, session)
}

// transientPubAck reports a refusal that passes: JetStream unavailable for
// a moment (leader election, quorum loss).
func transientPubAck(err error) bool {
	var e *pubAckError
	return errors.As(err, &e) && (e.ErrorCode == 10008 /* cluster not available */ || e.ErrorCode == 10004 /* incomplete */)
}

// reconnecting reports whether err is a request cut short by the
// connection losing its server while it reconnects to another (nats.go
// ends pending flushes with ErrConnectionClosed then), not by Close.
func (c *Client) reconnecting(err error) bool {
	return (errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrDisconnected)) && !c.nc.IsClosed()
}

// workerAnswers reports whether some worker serves the lane service.
func (c *Client) workerAnswers(ctx context.Context, token string) bool {
	_, err := c.requestMsg(ctx, nats.NewMsg(sessionsvc.Subject(token, sessionsvc.OpSettings)), time.Second)
	return !errors.Is(err, nats.ErrNoResponders)
}

// Stop ends the session's running turn without sending a new prompt: a stop
// command travels through the session's lane, cuts the turn at once (its
// run ends with an interrupted final event) and drops the messages queued
// before it, as the reference's /stop does; messages sent after it run as
// usual. Wait on the returned run for its result, whose text says which run
// it stopped, or that nothing was running.
func (c *Client) Stop(ctx context.Context, session string) (*Run, error) {
	in := events.Inbound{ID: newID(), Stop: true}
	if err := in.Validate(); err != nil {
		return nil, err
	}
	return c.publish(ctx, session, &in, false, true)
}

// SetQueueSettings stores a session's queue settings: what happens to its
// messages that name no mode (Mode), and for collect mode the debounce,
// cap and drop policy (old, new or summarize). Only the fields set change;
// unset ones keep their stored value or the default (mode followup;
// debounce 1 s, cap 20, drop summarize). The change is a message of the
// session's lane: it applies to every message sent after it, once the
// messages sent before it have been taken; Wait on the returned run to know
// it was applied (its result's text describes the settings in force).
func (c *Client) SetQueueSettings(ctx context.Context, session string, s QueueSettings) (*Run, error) {
	return c.SetSettings(ctx, session, SettingsChange{Queue: &s})
}

// ResetQueueSettings clears a session's stored queue settings (its run
// settings stay), in lane order like SetQueueSettings.
func (c *Client) ResetQueueSettings(ctx context.Context, session string) (*Run, error) {
	return c.sendSettings(ctx, session, &events.Inbound{ID: newID(), QueueSettings: &events.QueueSettings{Reset: true}})
}

func (c *Client) sendSettings(ctx context.Context, session string, in *events.Inbound) (*Run, error) {
	if err := in.Validate(); err != nil {
		return nil, err
	}
	return c.publish(ctx, session, in, false, true)
}

// QueueSettings returns a session's stored queue settings (zero when none
// are stored); queue.Resolve(s.Overrides()) gives the values in force.
// Settings returns them with the run settings and the session's state.
func (c *Client) QueueSettings(ctx context.Context, session string) (QueueSettings, error) {
	s, err := c.Settings(ctx, session)
	return s.Queue, err
}

// SettingsChange is a change to a session's stored settings, sent as one
// settings message so both parts change together. A nil part stays as
// stored. In Run, the fields set replace the stored ones, an empty Tools
// clears the stored tool policy, and Reset clears every run setting
// first.
type SettingsChange struct {
	Queue *QueueSettings
	Run   *events.RunSettings
	// Reset clears the stored queue and run settings first, in the same
	// message: no turn runs between the reset and the values set.
	Reset bool
}

// SessionSettings are a session's stored settings and state.
type SessionSettings struct {
	Queue QueueSettings       // zero when none are stored; queue.Resolve(Queue.Overrides()) gives the values in force
	Run   *events.RunSettings // nil when none are stored: the worker's defaults apply
	// State is the session's state after its last committed turn: the
	// auth profile its next turn starts on and the running total of its
	// usage (tokens and cost); nil before any turn reported either.
	State *events.SessionState
	// Unreadable, when set, says why the session's stored settings record
	// cannot be read: the worker runs the session on its defaults (Queue
	// and Run are empty), and the next settings change replaces the record
	// (SetSettings, ResetSettings).
	Unreadable string
}

// SetSettings changes a session's stored settings: its queue settings
// (see SetQueueSettings) and its run settings, which every later turn of
// the session uses where its message names none: model, thinking level,
// auth profile (which pins the session to it), history and tool-loop
// limits, and a tool policy that narrows the worker's. A model the fleet
// would not run (not allowed, or no key for its provider) is refused when
// stored: the change's run ends with an invalid_input error listing the
// models it runs, and nothing is stored; a stored model the fleet no
// longer runs when a turn uses it ends that turn the same way. The change is a message of the session's
// lane, applied exactly between the messages sent before and after it;
// Wait on the returned run to know it was applied (its result's text
// describes the settings in force).
func (c *Client) SetSettings(ctx context.Context, session string, ch SettingsChange) (*Run, error) {
	in := events.Inbound{ID: newID(), RunSettings: ch.Run}
	if ch.Queue != nil {
		in.QueueSettings = ch.Queue.Wire()
	}
	if ch.Reset {
		q, r := events.QueueSettings{}, events.RunSettings{}
		if in.QueueSettings != nil {
			q = *in.QueueSettings
		}
		if ch.Run != nil {
			r = *ch.Run
		}
		q.Reset, r.Reset = true, true
		in.QueueSettings, in.RunSettings = &q, &r
	}
	if !in.IsSettings() {
		return nil, errors.New("lanefleet: SetSettings: the change sets nothing")
	}
	return c.sendSettings(ctx, session, &in)
}

// ResetSettings clears a session's stored queue and run settings (its
// state stays), in lane order like SetSettings.
func (c *Client) ResetSettings(ctx context.Context, session string) (*Run, error) {
	return c.SetSettings(ctx, session, SettingsChange{Reset: true})
}

// Settings returns a session's stored settings and its state.
func (c *Client) Settings(ctx context.Context, session string) (SessionSettings, error) {
	var rep sessionsvc.SettingsReply
	if err := c.call(ctx, session, sessionsvc.OpSettings, nil, &rep); err != nil {
		return SessionSettings{}, err
	}
	return SessionSettings{Queue: QueueSettingsFromWire(rep.Settings), Run: rep.Run, State: rep.State, Unreadable: rep.Unreadable}, nil
}

// Run returns a handle on an existing run, e.g. to replay its events.
func (c *Client) Run(session, runID string) *Run {
	seq, _ := strconv.ParseUint(runID, 10, 64)
	return &Run{Session: session, ID: runID, Seq: seq, c: c}
}

// Follow returns the run runID of the same session, e.g. the run named by
// Meta.MergedInto of a message that collect mode merged into it. It keeps
// r's OnWait.
func (r *Run) Follow(runID string) *Run {
	f := r.c.Run(r.Session, runID)
	f.waitAfter, f.onWait = r.waitAfter, r.onWait
	return f
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
// run by collect mode returns that run's result. ErrUnknownRun means the
// session has no such run. Messages on the run's subject that are not
// events are skipped.
func (r *Run) Wait(ctx context.Context) (*events.Result, error) {
	for ev, err := range r.Events(ctx) {
		if err != nil {
			var de *events.DecodeError
			if errors.As(err, &de) {
				continue // not an event of the run (a forged or garbled message)
			}
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
				return r.Follow(into).Wait(ctx)
			}
			return res, nil
		}
	}
	return nil, fmt.Errorf("lanefleet: run %s: event stream ended without a final event", r.ID)
}

// History returns a session's transcript as pi session entries. It reads
// the transcript in pages from the lane service; a turn committed while it
// reads may or may not be included.
func (c *Client) History(ctx context.Context, session string) ([]message.Entry, error) {
	h, err := c.history(ctx, session, false)
	return h.entries, err
}

// transcript is a session's history as the lane service returns it.
type transcript struct {
	entries   []message.Entry
	sessionID string         // the pi session id of the newest record that has one
	header    *message.Entry // the imported file's header, nil when none
}

// history pages through the transcript. With raw it asks for the lines
// imported entries were read from; a worker too old to know them is asked
// again without.
func (c *Client) history(ctx context.Context, session string, raw bool) (transcript, error) {
	var (
		t transcript
		q = sessionsvc.HistoryRequest{Raw: raw}
	)
	for {
		body, err := json.Marshal(q)
		if err != nil {
			return transcript{}, err
		}
		var page sessionsvc.HistoryReply
		if err := c.call(ctx, session, sessionsvc.OpHistory, body, &page); err != nil {
			if q.Raw && q.From == 0 && sessionsvc.RefusedNewField(err) {
				q.Raw = false // a worker of a version without raw lines
				continue
			}
			return transcript{}, err
		}
		t.entries = append(t.entries, page.Entries...)
		if page.SessionID != "" {
			t.sessionID = page.SessionID
		}
		if page.Header != nil && t.header == nil {
			t.header = page.Header
		}
		if !page.More {
			return t, nil
		}
		if page.Next < q.From || page.Next == q.From && page.Skip <= q.Skip {
			return transcript{}, fmt.Errorf("lanefleet: history of %q: the lane service did not advance (page at %d/%d)", session, page.Next, page.Skip)
		}
		q = sessionsvc.HistoryRequest{From: page.Next, Skip: page.Skip, Raw: q.Raw}
	}
}

// Export writes a session's transcript as a pi session file (JSON Lines: a
// version 3 session header, then every entry), the format pi and OpenClaw
// read. An imported session keeps the file's header and lines as they
// were, so importing a file and exporting it unchanged gives the same
// bytes; the entries of later turns are written as pi writes them.
func (c *Client) Export(ctx context.Context, session string, w io.Writer) error {
	t, err := c.history(ctx, session, true)
	if err != nil {
		return err
	}
	entries := t.entries
	if h := t.header; h != nil && h.IsHeader() && h.ID != "" && (t.sessionID == "" || t.sessionID == h.ID) {
		return sessionfile.WriteEntries(w, append([]message.Entry{*h}, entries...))
	}
	header := message.Entry{Type: message.EntrySession, Version: message.SessionVersion, ID: t.sessionID,
		Timestamp: time.Now().UTC().Format("2006-01-02T15:04:05.000Z")}
	if len(entries) > 0 && entries[0].Timestamp != "" {
		header.Timestamp = entries[0].Timestamp
	}
	if header.ID == "" {
		header.ID = sessionfile.NewSessionID()
	}
	return sessionfile.WriteEntries(w, append([]message.Entry{header}, entries...))
}

// Import reads a pi/OpenClaw session file (any version; a worker migrates
// it and skips malformed lines) and stores it as the transcript of session,
// which must be new. Later turns continue the imported conversation under
// the file's session id; tool calls the file's last message left without a
// result are stored answered "not run" (sessionsvc.TextImportNotRun), so none
// can be approved. The file must fit the NATS server's max payload
// (ErrTooLarge); ErrNotEmpty means the session has a transcript already,
// ErrSessionBusy that a worker is running it.
func (c *Client) Import(ctx context.Context, session string, r io.Reader) error {
	if _, err := events.KeyToken(session); err != nil {
		return fmt.Errorf("lanefleet: session %q: %w", session, err)
	}
	limit := c.nc.MaxPayload()
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return fmt.Errorf("lanefleet: import: %w", err)
	}
	if int64(len(data)) > limit {
		return fmt.Errorf("%w: import into %q: the session file is over %d bytes", ErrTooLarge, session, limit)
	}
	// The import is not repeated after a timeout: it may have been stored.
	var rep sessionsvc.ImportReply
	return c.callOnce(ctx, session, sessionsvc.OpImport, data, &rep)
}

// ActiveRun is a run some worker is running now.
type ActiveRun struct {
	Session   string    `json:"session"`
	RunID     string    `json:"runId"`
	Worker    string    `json:"worker"`
	Attempt   int       `json:"attempt,omitempty"` // 1 + earlier tries of the run
	StartedAt time.Time `json:"startedAt"`
	// Phase is "running" or "compacting".
	Phase string `json:"phase"`
	// Holding says how Worker holds the session's lane now, from the
	// lane's lease (kvstore.Holding): "live"; "unresponsive" (it missed
	// its lease renewals: it stopped answering, and another worker takes
	// the run over once the lease lapses, at LeaseExpires); "lapsed" (its
	// lease lapsed, or another worker holds the lane: the entry outlived
	// its worker, and the run starts again when a worker takes the lane).
	// "" when the lease could not be read.
	Holding string `json:"holding,omitempty"`
	// LeaseRenewed is when Worker last renewed the lane's lease (by the
	// NATS server's clock), LeaseExpires when the lease lapses unless
	// renewed; zero unless Worker holds the lane.
	LeaseRenewed time.Time `json:"leaseRenewed,omitzero"`
	LeaseExpires time.Time `json:"leaseExpires,omitzero"`
	// Children counts the session's pending sub-agents and Parent names,
	// for a sub-agent, the session that spawned it: the session's state
	// as its last committed turn left it (the running turn's start).
	Children int    `json:"children,omitempty"`
	Parent   string `json:"parent,omitempty"`
}

// ActiveRuns lists the runs the fleet's workers are running now, oldest
// first, each with its session's pending sub-agents and parent, and how
// its worker holds the session's lane (Holding): an
// entry stays in the registry after its worker died (until the registry's
// TTL, default 1 hour), and says so once the worker's lease lapsed. It
// reads the runs and lanes buckets, which a sender or viewer may not:
// ErrPermission then.
func (c *Client) ActiveRuns(ctx context.Context) ([]ActiveRun, error) {
	// A JetStream API request the user may not make is dropped by the
	// server: ask once with a permission check first.
	probe := nats.NewMsg(kvstore.RunsInfoSubject())
	if _, err := c.requestMsg(ctx, probe, 5*time.Second); errors.Is(err, ErrPermission) {
		return nil, fmt.Errorf("%w (listing the runs needs read access to the %s bucket: the admin role)", err, kvstore.DefaultRunsBucket)
	}
	js, err := jetstream.New(c.nc)
	if err != nil {
		return nil, fmt.Errorf("lanefleet: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	runs, err := kvstore.BindRuns(ctx, js, "")
	if err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrNoStreamResponse) {
			return nil, fmt.Errorf("%w: no %s bucket", ErrNoFleet, kvstore.DefaultRunsBucket)
		}
		return nil, fmt.Errorf("lanefleet: runs: %w", err)
	}
	list, err := runs.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("lanefleet: runs: %w", err)
	}
	// The lanes' leases say whether each entry's worker still holds its
	// lane; without them the list is still worth having.
	lanes, err := kvstore.Bind(ctx, js, "")
	if err != nil {
		lanes = nil
	}
	now := time.Now()
	out := make([]ActiveRun, 0, len(list))
	for _, r := range list {
		ar := ActiveRun{Session: r.Session, RunID: r.RunID, Worker: r.Worker, Attempt: r.Attempt,
			StartedAt: time.UnixMilli(r.StartedAt), Phase: r.Phase}
		if tok, err := events.KeyToken(r.Session); err == nil && lanes != nil {
			if st, err := lanes.Lease(ctx, tok); err == nil {
				ar.Holding = string(st.HeldBy(r.Worker, now))
				if ar.Holding != string(kvstore.HoldingLapsed) {
					ar.LeaseRenewed, ar.LeaseExpires = st.Renewed, st.Expires()
				}
			}
			if cur, err := lanes.Cursor(ctx, tok); err == nil && cur.State != nil {
				ar.Children = len(cur.State.Children)
				if p := cur.State.Parent; p != nil {
					ar.Parent = p.Session
				}
			}
		}
		out = append(out, ar)
	}
	slices.SortFunc(out, func(a, b ActiveRun) int { return cmp.Compare(a.StartedAt.UnixNano(), b.StartedAt.UnixNano()) })
	return out, nil
}

// derivedInboxPrefix returns the inbox prefix a connection with opts to url
// gets when it sets none: permission.InboxPrefix of the user it
// authenticates as with a password; "" when it sets one, authenticates
// otherwise (a token, an nkey, a credentials file: no user name), or the
// name cannot be a subject token.
func derivedInboxPrefix(url string, opts []nats.Option) string {
	o := nats.GetDefaultOptions()
	for _, opt := range opts {
		if opt != nil {
			_ = opt(&o) // a failing option fails nats.Connect, which says why
		}
	}
	if o.InboxPrefix != "" {
		return ""
	}
	user, pass := o.User, o.Password
	if user == "" {
		first, _, _ := strings.Cut(url, ",")
		if u, err := neturl.Parse(strings.TrimSpace(first)); err == nil && u.User != nil {
			user = u.User.Username()
			pass, _ = u.User.Password()
		}
	}
	if user == "" || pass == "" || strings.ContainsAny(user, ".*> \t\r\n") {
		return ""
	}
	return permission.InboxPrefix(user)
}

func newID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return strings.ToLower(hex.EncodeToString(b))
}
