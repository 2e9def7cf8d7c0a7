package lanefleet

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/backoff"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
	"github.com/lanefleet/lanefleet/permission"
)

// Bounds of requests to the lane service.
const (
	// callTimeout bounds one request; the service bounds its own work to
	// sessionsvc.RequestTimeout.
	callTimeout = sessionsvc.RequestTimeout + 5*time.Second
	// callRetryBudget bounds the retries of a request that failed for a
	// reason that passes (timeouts, JetStream unavailable on the worker).
	callRetryBudget = time.Minute
	// noWorkerWait is how long no worker may answer before a request
	// fails with ErrNoFleet.
	noWorkerWait = 5 * time.Second
)

// callBackoff is the wait between a request's tries: 100ms, doubling up
// to a second.
var callBackoff = backoff.Policy{Base: 100 * time.Millisecond, Max: time.Second}

// call asks the lane service of session for op with body and decodes the
// reply into v, retrying what passes: no worker answering for a moment (a
// restart), timeouts and unavailable replies (leader elections). Safe for
// operations that change nothing.
func (c *Client) call(ctx context.Context, session, op string, body []byte, v any) error {
	return c.callRetry(ctx, session, op, body, v, true)
}

// callOnce is call for an operation that must not run twice: it retries
// only while no worker answers (then nothing was received).
func (c *Client) callOnce(ctx context.Context, session, op string, body []byte, v any) error {
	return c.callRetry(ctx, session, op, body, v, false)
}

func (c *Client) callRetry(ctx context.Context, session, op string, body []byte, v any, retry bool) error {
	tok, err := events.KeyToken(session)
	if err != nil {
		return fmt.Errorf("lanefleet: session %q: %w", session, err)
	}
	subj := sessionsvc.Subject(tok, op)
	start := time.Now()
	var noWorkerSince time.Time
	b := backoff.Counter{Policy: callBackoff}
	for {
		data, err := c.requestMsg(ctx, &nats.Msg{Subject: subj, Data: body}, callTimeout)
		if err == nil {
			if err := decodeReply(data, v); err != nil {
				return fmt.Errorf("lanefleet: %s of session %q: malformed reply: %w", op, session, err)
			}
			return nil
		}
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("lanefleet: %s of session %q: %w", op, session, context.Cause(ctx))
		case errors.Is(err, nats.ErrNoResponders):
			if noWorkerSince.IsZero() {
				noWorkerSince = time.Now()
			}
			if time.Since(noWorkerSince) >= noWorkerWait {
				return fmt.Errorf("%w: no worker answers %s", ErrNoFleet, subj)
			}
		case retry && transient(err) && time.Since(start) < callRetryBudget:
		default:
			return opError(op, session, err)
		}
		if err := b.Wait(ctx); err != nil {
			return fmt.Errorf("lanefleet: %s of session %q: %w", op, session, err)
		}
	}
}

// opError says which operation failed, with the client's sentinel for the
// lane service's error codes.
func opError(op, session string, err error) error {
	var se *sessionsvc.Error
	if errors.As(err, &se) {
		switch se.Code {
		case sessionsvc.CodeBusy:
			return fmt.Errorf("%w (%s of session %q)", ErrSessionBusy, op, session)
		case sessionsvc.CodeNotEmpty:
			return fmt.Errorf("%w (%s of session %q)", ErrNotEmpty, op, session)
		case sessionsvc.CodeTooLarge:
			return fmt.Errorf("%w: %s of session %q: %w", ErrTooLarge, op, session, err)
		}
	}
	if errors.Is(err, ErrPermission) {
		return fmt.Errorf("%w (%s of session %q)", err, op, session)
	}
	if errors.Is(err, nats.ErrMaxPayload) {
		return fmt.Errorf("%w: %s of session %q", ErrTooLarge, op, session)
	}
	return fmt.Errorf("lanefleet: %s of session %q: %w", op, session, err)
}

// transient reports a failed request worth repeating.
func transient(err error) bool {
	var se *sessionsvc.Error
	return errors.As(err, &se) && se.Temporary() || isTimeout(err)
}

func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}

// requestMsg sends m as a request and returns the reply's data. Unlike
// nats.Conn.Request it flushes before it waits, so a subject the user may
// not publish to (or an inbox it may not subscribe to) fails at once with
// ErrPermission instead of timing out: the server's permission error comes
// before the flush's answer. No responders is nats.ErrNoResponders; a micro
// error reply is a *sessionsvc.Error.
//
// Replies come to the client's reply subscription (one for all requests,
// see replyMux), so a request costs the server no subscription of its own;
// a client whose user may not subscribe to it subscribes an inbox per
// request instead.
func (c *Client) requestMsg(ctx context.Context, m *nats.Msg, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	before := c.nc.LastError()
	inbox, replies, done, own, err := c.replies.await(ctx, c)
	if err != nil {
		return nil, err
	}
	expired := false
	defer func() { done(expired) }()
	if own {
		// An inbox of its own, after the shared one was refused: the
		// server has taken or refused it by the flush's answer, and a
		// refused one fails the request before it is sent (a publish
		// whose acknowledgement cannot come was stored all the same).
		if err := c.nc.FlushWithContext(ctx); err != nil {
			return nil, err
		}
		if err := c.denied(before, "Subscription to", inbox); err != nil {
			return nil, fmt.Errorf("%w; nothing was sent", err)
		}
	}
	m.Reply = inbox
	if err := c.nc.PublishMsg(m); err != nil {
		return nil, err
	}
	if err := c.nc.FlushWithContext(ctx); err != nil {
		return nil, err
	}
	if err := c.denied(before, "Publish to", m.Subject); err != nil {
		return nil, err
	}
	if err := c.denied(before, "Subscription to", inbox); err != nil {
		// Seen only now: the request went out, and its reply cannot come.
		return nil, &sentError{err}
	}
	var reply *nats.Msg
	select {
	case r, ok := <-replies:
		if !ok { // the client closed
			return nil, nats.ErrConnectionClosed
		}
		reply = r
	case <-ctx.Done():
		expired = errors.Is(ctx.Err(), context.DeadlineExceeded)
		return nil, ctx.Err()
	}
	if reply.Header.Get("Status") == "503" && len(reply.Data) == 0 {
		return nil, nats.ErrNoResponders
	}
	if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
		return nil, &sessionsvc.Error{Code: code, Description: reply.Header.Get(micro.ErrorHeader)}
	}
	return reply.Data, nil
}

// replyMux is a client's subscription for the replies to its requests:
// one wildcard subscription under a fresh inbox, each request a token of
// its own under it. Subscribing an inbox per request cost the server a
// subscription and its removal per request (sublist and cache work that
// grows with the server's subjects).
//
// A subscription that hears nothing during a request's whole wait is
// dropped (the next request subscribes anew): the server may have refused
// it without the client seeing the refusal (subscribe reads the refusal
// from the connection's last error, which the read loop may overwrite
// before the flush's answer), or removed it since (a permission reload, a
// reconnect to a server that refuses it). The new subscription checks the
// refusal again. A dropped subscription stays until the requests waiting
// on it end.
type replyMux struct {
	mu      sync.Mutex
	refused bool    // the server refused the subscription: an inbox per request
	cur     *muxSub // the subscription requests use; nil: the next subscribes
	// subscribing is closed when the subscription under way (nil: none)
	// is in place or failed; requests wait on it, not on mu.
	subscribing chan struct{}
	closes      uint64                    // close calls so far: a subscription made across one is dropped
	subs        []*muxSub                 // every subscription not yet ended, cur among them
	waiting     map[string]chan *nats.Msg // by reply subject
}

// muxSub is one of the mux's subscriptions; guarded by the mux's mu.
type muxSub struct {
	sub       *nats.Subscription
	prefix    string // the inbox, then "."
	waiters   int    // requests waiting on it
	delivered uint64 // replies it handed over
}

// await returns the inbox of one request, the channel its reply comes on
// (closed if the client closes first), and done, which ends the wait;
// expired says the wait ended with the request's deadline. own says the
// inbox is the request's own subscription (the shared one was refused),
// not yet known to be taken by the server. The first
// request subscribes and flushes: the subscription is used once the server
// took it. The flush is a round trip to the server; mu is not held across
// it, so replies to other requests and their ends go on meanwhile, and the
// requests that need the subscription wait for it (or their ctx).
func (x *replyMux) await(ctx context.Context, c *Client) (inbox string, replies chan *nats.Msg, done func(expired bool), own bool, err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	closes := x.closes
	for x.cur == nil && !x.refused {
		if gate := x.subscribing; gate != nil {
			x.mu.Unlock()
			select {
			case <-gate:
			case <-ctx.Done():
			}
			x.mu.Lock()
			switch {
			case x.closes != closes:
				return "", nil, nil, false, nats.ErrConnectionClosed
			case ctx.Err() != nil:
				return "", nil, nil, false, ctx.Err()
			}
			continue
		}
		gate := make(chan struct{})
		x.subscribing = gate
		x.mu.Unlock()
		ms, refused, err := subscribeReplies(ctx, c, x)
		x.mu.Lock()
		x.subscribing = nil
		close(gate)
		switch {
		case x.closes != closes:
			// The client closed meanwhile: the requests in flight end,
			// and so does this one.
			if ms != nil {
				_ = ms.sub.Unsubscribe()
			}
			return "", nil, nil, false, nats.ErrConnectionClosed
		case err != nil:
			return "", nil, nil, false, err
		case refused:
			x.refused = true
		default:
			x.cur, x.subs = ms, append(x.subs, ms)
			if x.waiting == nil {
				x.waiting = map[string]chan *nats.Msg{}
			}
		}
	}
	replies = make(chan *nats.Msg, 1)
	if x.refused {
		// A channel of one: SubscribeSync would allocate its default
		// 64Ki-slot channel for the one reply.
		inbox = c.nc.NewInbox()
		sub, err := c.nc.ChanSubscribe(inbox, replies)
		if err != nil {
			return "", nil, nil, false, err
		}
		return inbox, replies, func(bool) { _ = sub.Unsubscribe() }, true, nil
	}
	ms := x.cur
	// 128 random bits: whoever may publish under the client's inbox
	// cannot answer a request by guessing its subject (a counter, or a
	// NUID, whose sequence grows by a small step, can be guessed from
	// one seen).
	inbox = ms.prefix + rand.Text()
	x.waiting[inbox] = replies
	ms.waiters++
	mark := ms.delivered
	return inbox, replies, func(expired bool) { x.leave(ms, inbox, expired, mark) }, false, nil
}

// leave ends the wait of the request on ms for the reply to inbox. A
// request whose deadline passed while ms handed over nothing since the
// request began (mark) drops ms; a dropped one ends with its last waiter.
func (x *replyMux) leave(ms *muxSub, inbox string, expired bool, mark uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.waiting, inbox)
	ms.waiters--
	if expired && ms.delivered == mark && x.cur == ms {
		x.cur = nil
	}
	if x.cur != ms && ms.waiters == 0 {
		x.end(ms)
	}
}

// end unsubscribes ms, if it is still subscribed.
func (x *replyMux) end(ms *muxSub) {
	for i, s := range x.subs {
		if s == ms {
			_ = ms.sub.Unsubscribe()
			x.subs = append(x.subs[:i], x.subs[i+1:]...)
			return
		}
	}
}

// subscribeReplies makes a reply subscription of x, in place on the server
// once it returns; refused says the server refused it (then every later
// request subscribes an inbox of its own, which reports the refusal). It
// runs without x's mu.
func subscribeReplies(ctx context.Context, c *Client, x *replyMux) (ms *muxSub, refused bool, err error) {
	before := c.nc.LastError()
	ms = &muxSub{prefix: c.nc.NewInbox() + "."}
	sub, err := c.nc.Subscribe(ms.prefix+"*", func(m *nats.Msg) { x.deliver(ms, m) })
	if err != nil {
		return nil, false, err
	}
	if err := c.nc.FlushWithContext(ctx); err != nil {
		_ = sub.Unsubscribe()
		return nil, false, err
	}
	if c.denied(before, "Subscription to", ms.prefix+"*") != nil {
		_ = sub.Unsubscribe()
		return nil, true, nil
	}
	ms.sub = sub
	return ms, false, nil
}

// close ends the reply subscriptions and the requests waiting on them:
// their channels close (requestMsg returns nats.ErrConnectionClosed, which
// is not retried, so no request subscribes anew after Close).
func (x *replyMux) close() {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, ms := range x.subs {
		_ = ms.sub.Unsubscribe()
	}
	for _, ch := range x.waiting {
		close(ch)
	}
	x.cur, x.subs, x.waiting = nil, nil, nil
	x.closes++
}

// deliver hands a reply that came on ms to its request, if it still
// waits; a second reply (a request answered twice) is dropped. It sends
// holding mu, so close cannot close the channel under it; the send never
// blocks: the channel has room for one and its subject leaves waiting
// with the one send.
func (x *replyMux) deliver(ms *muxSub, m *nats.Msg) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if ch := x.waiting[m.Subject]; ch != nil {
		delete(x.waiting, m.Subject)
		ms.delivered++
		ch <- m
	}
}

// denied returns ErrPermission when the server refused what ("Publish to" or
// "Subscription to") on subject since the connection's last error was
// before.
func (c *Client) denied(before error, what, subject string) error {
	err := c.nc.LastError()
	if err == nil || err == before || !errors.Is(err, nats.ErrPermissionViolation) {
		return nil
	}
	if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(what+` "`+subject+`"`)) {
		return nil
	}
	detail, _, _ := strings.Cut(strings.TrimPrefix(err.Error(), nats.ErrPermissionViolation.Error()+": "), " on connection")
	if prefix := cmp.Or(c.nc.Opts.InboxPrefix, "_INBOX"); what == "Subscription to" && strings.HasPrefix(subject, prefix+".") {
		want := "_INBOX_<user>"
		if u := c.nc.Opts.User; u != "" && !strings.ContainsAny(u, ".*> \t\r\n") {
			want = permission.InboxPrefix(u)
		}
		if want == prefix {
			return fmt.Errorf("%w: %s: this connection's replies come under %s, which its NATS user may not subscribe to; its permissions must allow %s.> (every role `worker permissions` prints does)",
				ErrPermission, detail, prefix, prefix)
		}
		return fmt.Errorf("%w: %s: this connection's replies come under %s, which its NATS user may not subscribe to; connect with the inbox prefix its permissions allow (--inbox-prefix %s or NATS_INBOX_PREFIX; nats.CustomInboxPrefix in Go)",
			ErrPermission, detail, prefix, want)
	}
	return fmt.Errorf("%w: %s", ErrPermission, detail)
}

// sentError is a request that went out but whose reply cannot reach the
// connection: the server refused its inbox only after it was sent.
type sentError struct{ err error }

func (e *sentError) Error() string { return e.err.Error() }
func (e *sentError) Unwrap() error { return e.err }

// decodeReply decodes a lane service reply through the bounded decoder:
// whatever answers on a lane's service subject cannot make the client
// allocate what a header declares.
func decodeReply(data []byte, v any) error {
	return events.UnmarshalMsgpack(data, v)
}

// redactURL hides passwords in a server URL list for messages.
func redactURL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			continue
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		} else {
			u.User = url.User("xxxxx") // a token
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
