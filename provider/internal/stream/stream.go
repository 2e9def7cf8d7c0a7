// Package stream holds what every provider adapter shares once the bytes are
// decoded: assembling the assistant message block by block while emitting
// the pi-ai event protocol, computing cost, watching a body for stalls and
// turning transport failures into classified *provider.Error values.
package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/failover"
	"github.com/lanefleet/lanefleet/provider/internal/sse"
)

// IdleTimeoutDefault is how long a stream may go without a byte before it is
// abandoned as stalled. It is generous because some endpoints stay silent
// while a model reasons (Chat Completions sends nothing until the first
// token).
const IdleTimeoutDefault = 5 * time.Minute

// ErrStalled is the cancel cause of a request whose body went silent.
var ErrStalled = errors.New("stream stalled")

// block is the growing state of one content block.
type block struct {
	text strings.Builder // text or thinking
	args []byte          // tool call arguments JSON
	open bool
}

// Builder assembles an assistant message from deltas and emits events. It is
// used by one goroutine.
type Builder struct {
	msg     message.Message
	blocks  []*block
	emit    func(provider.Event)
	model   provider.Model
	started bool
}

// NewBuilder starts an assistant message for model. emit may be nil.
func NewBuilder(model provider.Model, now time.Time, emit func(provider.Event)) *Builder {
	if emit == nil {
		emit = func(provider.Event) {}
	}
	return &Builder{
		msg: message.Message{
			Role: message.RoleAssistant, API: model.API, Provider: model.Provider, Model: model.ID,
			Timestamp: now.UnixMilli(), Content: message.BlocksOf(),
		},
		emit:  emit,
		model: model,
	}
}

// Start emits the start event once.
func (b *Builder) Start() {
	if !b.started {
		b.started = true
		b.emit(provider.Event{Type: provider.EventStart})
	}
}

func (b *Builder) add(bl message.Block) int {
	b.Start()
	b.msg.Content.Blocks = append(b.msg.Content.Blocks, bl)
	b.blocks = append(b.blocks, &block{open: true})
	return len(b.msg.Content.Blocks) - 1
}

// Timestamp returns the message's timestamp (Unix milliseconds).
func (b *Builder) Timestamp() int64 { return b.msg.Timestamp }

// Len returns the number of blocks so far.
func (b *Builder) Len() int { return len(b.msg.Content.Blocks) }

// Block returns block i for adapters to set provider fields (signatures).
func (b *Builder) Block(i int) *message.Block { return &b.msg.Content.Blocks[i] }

// IsOpen reports whether block i has not been ended.
func (b *Builder) IsOpen(i int) bool { return i >= 0 && i < len(b.blocks) && b.blocks[i].open }

// BeginText opens a text block and returns its index.
func (b *Builder) BeginText() int {
	i := b.add(message.Block{Type: message.BlockText})
	b.emit(provider.Event{Type: provider.EventTextStart, ContentIndex: i})
	return i
}

// BeginThinking opens a thinking block and returns its index.
func (b *Builder) BeginThinking() int {
	i := b.add(message.Block{Type: message.BlockThinking})
	b.emit(provider.Event{Type: provider.EventThinkingStart, ContentIndex: i})
	return i
}

// BeginToolCall opens a tool call block and returns its index.
func (b *Builder) BeginToolCall(id, name string) int {
	i := b.add(message.Block{Type: message.BlockToolCall, ID: id, Name: name})
	b.emit(provider.Event{Type: provider.EventToolCallStart, ContentIndex: i})
	return i
}

// Append adds a text or thinking delta, or a raw JSON fragment of tool call
// arguments, to block i.
func (b *Builder) Append(i int, delta string) {
	if delta == "" || !b.IsOpen(i) {
		return
	}
	bl := b.blocks[i]
	var t provider.EventType
	switch b.msg.Content.Blocks[i].Type {
	case message.BlockText:
		bl.text.WriteString(delta)
		t = provider.EventTextDelta
	case message.BlockThinking:
		bl.text.WriteString(delta)
		t = provider.EventThinkingDelta
	case message.BlockToolCall:
		bl.args = append(bl.args, delta...)
		t = provider.EventToolCallDelta
	}
	b.emit(provider.Event{Type: t, ContentIndex: i, Delta: delta})
}

// SetArgs replaces the raw arguments JSON of tool call block i (for APIs
// that send whole calls).
func (b *Builder) SetArgs(i int, raw string) {
	if b.IsOpen(i) {
		b.blocks[i].args = append(b.blocks[i].args[:0], raw...)
	}
}

// End closes block i and emits its end event. Tool call arguments are parsed
// here; invalid JSON degrades to an empty object.
func (b *Builder) End(i int) {
	if !b.IsOpen(i) {
		return
	}
	bl := b.blocks[i]
	bl.open = false
	blk := &b.msg.Content.Blocks[i]
	switch blk.Type {
	case message.BlockText:
		blk.Text = bl.text.String()
		b.emit(provider.Event{Type: provider.EventTextEnd, ContentIndex: i, Content: blk.Text})
	case message.BlockThinking:
		blk.Thinking = bl.text.String()
		b.emit(provider.Event{Type: provider.EventThinkingEnd, ContentIndex: i, Content: blk.Thinking})
	case message.BlockToolCall:
		blk.Arguments = ParseArgs(bl.args)
		bl.args = nil
		c := blk.Clone()
		b.emit(provider.Event{Type: provider.EventToolCallEnd, ContentIndex: i, ToolCall: &c})
	}
}

// EndAll closes every open block in order.
func (b *Builder) EndAll() {
	for i := range b.blocks {
		b.End(i)
	}
}

// flush copies the text of open blocks into the message without closing them
// (for a failed stream, whose partial content stays).
func (b *Builder) flush() {
	for i, bl := range b.blocks {
		if !bl.open {
			continue
		}
		blk := &b.msg.Content.Blocks[i]
		switch blk.Type {
		case message.BlockText:
			blk.Text = bl.text.String()
		case message.BlockThinking:
			blk.Thinking = bl.text.String()
		case message.BlockToolCall:
			blk.Arguments = ParseArgs(bl.args)
		}
		bl.open = false
	}
}

// HasToolCalls reports whether any tool call block exists.
func (b *Builder) HasToolCalls() bool {
	for _, bl := range b.msg.Content.Blocks {
		if bl.Type == message.BlockToolCall {
			return true
		}
	}
	return false
}

// SetUsage records usage (cost is computed from the model's price).
func (b *Builder) SetUsage(u message.Usage) {
	SetCost(b.model, &u)
	b.msg.Usage = &u
}

// Usage returns the usage recorded so far, or nil.
func (b *Builder) Usage() *message.Usage { return b.msg.Usage }

// Done closes open blocks, sets the stop reason and emits done.
func (b *Builder) Done(stop message.StopReason) message.Message {
	b.Start()
	b.EndAll()
	b.msg.StopReason = stop
	if b.msg.Usage == nil {
		b.SetUsage(message.Usage{})
	}
	out := b.msg.Clone()
	b.emit(provider.Event{Type: provider.EventDone, Reason: stop, Message: &out})
	return b.msg
}

// Fail ends the message with err: partial content stays, the stop reason is
// aborted for ReasonAborted and error otherwise, ErrorMessage is set (the
// provider's message, prefixed with the HTTP status when there is one), and
// an error event is emitted. It returns the message and err.
func (b *Builder) Fail(err *provider.Error) (message.Message, error) {
	b.Start()
	b.flush()
	b.msg.StopReason = message.StopError
	if err.Reason == provider.ReasonAborted {
		b.msg.StopReason = message.StopAborted
	}
	b.msg.ErrorMessage = err.Message
	if b.msg.ErrorMessage == "" {
		b.msg.ErrorMessage = err.Error()
	}
	if err.Status != 0 {
		// "<status> <message>", as the JavaScript SDKs word HTTP errors, so
		// text classifiers (failover.FailoverReason, UserText) see the status.
		b.msg.ErrorMessage = fmt.Sprintf("%d %s", err.Status, b.msg.ErrorMessage)
	}
	if b.msg.Usage == nil {
		b.SetUsage(message.Usage{})
	}
	out := b.msg.Clone()
	b.emit(provider.Event{Type: provider.EventError, Reason: b.msg.StopReason, Message: &out})
	return b.msg, err
}

// ParseArgs parses tool call arguments; empty or invalid JSON, or JSON that
// is not an object, gives an empty object.
func ParseArgs(raw []byte) map[string]any {
	var m map[string]any
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil || m == nil {
		return map[string]any{}
	}
	return m
}

// SetCost fills u.Cost from the model's per-million prices and u.TotalTokens
// when it is zero.
func SetCost(m provider.Model, u *message.Usage) {
	const perM = 1e6
	u.Cost.Input = m.Cost.Input / perM * float64(u.Input)
	u.Cost.Output = m.Cost.Output / perM * float64(u.Output)
	u.Cost.CacheRead = m.Cost.CacheRead / perM * float64(u.CacheRead)
	u.Cost.CacheWrite = m.Cost.CacheWrite / perM * float64(u.CacheWrite)
	u.Cost.Total = u.Cost.Input + u.Cost.Output + u.Cost.CacheRead + u.Cost.CacheWrite
	if u.TotalTokens == 0 {
		u.TotalTokens = u.Input + u.Output + u.CacheRead + u.CacheWrite
	}
}

// Watch derives the request context for one call: it is cancelled with
// ErrStalled when idle passes without Touch being called (idle <= 0 uses
// IdleTimeoutDefault). Stop must be called when the call ends.
type Watch struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer
	idle   time.Duration
	tail   bool // reading past the terminal event: reads no longer restart the timer
}

// NewWatch starts watching; the timer also covers the wait for headers.
func NewWatch(parent context.Context, idle time.Duration) *Watch {
	if idle <= 0 {
		idle = IdleTimeoutDefault
	}
	ctx, cancel := context.WithCancelCause(parent)
	w := &Watch{ctx: ctx, cancel: cancel, idle: idle}
	w.timer = time.AfterFunc(idle, func() { cancel(fmt.Errorf("%w: no data for %s", ErrStalled, idle)) })
	return w
}

// Context is the request context.
func (w *Watch) Context() context.Context { return w.ctx }

// Touch restarts the idle timer, unless the watch is reading a tail.
func (w *Watch) Touch() {
	if !w.tail {
		w.timer.Reset(w.idle)
	}
}

// Tail bounds on what Drain reads after a terminal event.
const (
	tailMax   = 64 << 10
	tailGrace = time.Second
)

// drainTail reads and discards what follows a stream's terminal event —
// at most tailMax bytes, for at most tailGrace, then the watch is spent. A
// body that ends within those bounds (servers end the stream right after
// the terminal event) has been read to its end, so net/http keeps its
// HTTP/1.1 connection for the next request instead of closing it; a body
// that goes on is closed with its connection. A nil watch reads nothing
// (there is no timer to bound the read).
func (w *Watch) drainTail(body io.Reader) {
	if w == nil {
		return
	}
	w.tail = true
	w.timer.Reset(tailGrace)
	_, _ = io.Copy(io.Discard, io.LimitReader(body, tailMax))
}

// Stop releases the watch.
func (w *Watch) Stop() {
	w.timer.Stop()
	w.cancel(context.Canceled)
}

// Body wraps a response body so every successful read restarts the timer.
func (w *Watch) Body(rc io.ReadCloser) io.ReadCloser { return &watchedBody{rc: rc, w: w} }

type watchedBody struct {
	rc io.ReadCloser
	w  *Watch
}

// Read reads from the body and restarts the idle timer on progress.
func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.w.Touch()
	}
	return n, err
}

// Close closes the body.
func (b *watchedBody) Close() error { return b.rc.Close() }

// Classify turns a failure of the call into a classified error: aborted when
// the caller's context ended, timeout when the watch saw a stall, the error's
// own classification when it is already a *provider.Error, and otherwise
// failover.ClassifyError on it (a transport failure nothing recognises is
// treated as a transient timeout). where prefixes the message
// ("openai: read stream").
func Classify(parent context.Context, w *Watch, where string, err error) *provider.Error {
	if parent.Err() != nil {
		return &provider.Error{Reason: provider.ReasonAborted, Message: "Request was aborted", Err: context.Cause(parent)}
	}
	if w != nil {
		if cause := context.Cause(w.ctx); errors.Is(cause, ErrStalled) {
			return &provider.Error{Reason: provider.ReasonTimeout, Message: where + ": " + cause.Error(), Err: cause}
		}
	}
	var pe *provider.Error
	if errors.As(err, &pe) {
		return pe
	}
	r := failover.ClassifyError(err)
	if r == provider.ReasonUnknown || r == provider.ReasonAborted {
		r = provider.ReasonTimeout
	}
	return &provider.Error{Reason: r, Message: where + ": " + err.Error(), Err: err}
}

// NotAStream checks a 200 response that should be an event stream. A JSON
// body (some gateways answer errors with 200 and a JSON error object)
// is read, closed and returned as a classified error; nil means the body is
// a stream (or unlabelled) and the caller reads it.
func NotAStream(resp *http.Response) *provider.Error {
	ct := strings.ToLower(resp.Header.Get("Content-Type"))
	if !strings.Contains(ct, "application/json") {
		return nil
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	if err != nil {
		return &provider.Error{Reason: provider.ReasonTimeout, Message: "read response: " + err.Error(), Err: err}
	}
	pe := failover.FromStream(raw, errors.New("JSON body instead of an event stream"))
	if pe.Message == "" {
		pe.Message = "expected an event stream, got a JSON body"
	}
	return pe
}

// Protocol returns the error for a stream that broke the protocol (malformed
// JSON, an unknown event, a missing terminal event): a transient failure the
// run loop may retry.
func Protocol(format string, args ...any) *provider.Error {
	err := fmt.Errorf(format, args...)
	return &provider.Error{Reason: provider.ReasonTimeout, Message: err.Error(), Err: err}
}

// Drain reads the SSE events of body, the watched response body, and hands
// each to handle until stop reports true or the body ends, then checks the
// caller's context. It returns nil when the reply may be finished, else the
// classified failure: handle's error as is; a read failure as Classify
// "<name>: read stream", except a stall after done reports true (the
// terminal event arrived, only trailing data is missing), which ends the
// loop like the body's end; and Classify "<name>" when ctx ended. stop and
// done may be nil (never). After stop it reads what is left of a body that
// ends promptly, so the connection can be reused (see drainTail); the reply
// is whole by then, so nothing that happens to that read is an error.
func Drain(ctx context.Context, w *Watch, name string, body io.Reader, stop, done func() bool, handle func(sse.Event) *provider.Error) *provider.Error {
	rd := sse.NewReader(body)
	defer rd.Close()
	for stop == nil || !stop() {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			perr := Classify(ctx, w, name+": read stream", err)
			if done != nil && done() && perr.Reason == provider.ReasonTimeout {
				break
			}
			return perr
		}
		if perr := handle(ev); perr != nil {
			return perr
		}
	}
	if ctx.Err() != nil {
		return Classify(ctx, w, name, ctx.Err())
	}
	if stop != nil && stop() {
		// The reply is whole; what follows is only read for the connection.
		w.drainTail(body)
	}
	return nil
}

// HTTPError reads (at most 1 MiB of) and closes the body of an HTTP error
// response and classifies it with failover.FromHTTP; cause is the error
// kept on it (the status text) and now the clock for Retry-After dates.
func HTTPError(status int, header http.Header, body io.ReadCloser, cause error, now time.Time) *provider.Error {
	raw, _ := io.ReadAll(io.LimitReader(body, 1<<20))
	_ = body.Close()
	return failover.FromHTTP(status, header, raw, cause, now)
}

// InBand returns the classified error of a chunk whose error field is set
// (present and not null), or nil. data is the whole chunk, given to
// failover.FromStream; where names the error kept on it
// ("openai: error in stream").
func InBand(field json.RawMessage, data []byte, where string) *provider.Error {
	if len(field) == 0 || bytes.Equal(field, []byte("null")) {
		return nil
	}
	return failover.FromStream(data, errors.New(where))
}

// Scrub returns e with the API key replaced by "[redacted]" in its message
// and wrapped error, should a transport error ever echo a header; e itself
// when the key is empty or absent.
func Scrub(e *provider.Error, key provider.Secret) *provider.Error {
	k := key.Reveal()
	if k == "" || !strings.Contains(e.Error(), k) && (e.Err == nil || !strings.Contains(e.Err.Error(), k)) {
		return e
	}
	c := *e
	c.Message = strings.ReplaceAll(c.Message, k, "[redacted]")
	if c.Err != nil {
		c.Err = errors.New(strings.ReplaceAll(c.Err.Error(), k, "[redacted]"))
	}
	return &c
}
