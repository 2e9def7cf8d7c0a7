package remote

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet/tools"
)

// updateRoom is how many partial results of one call may wait for its
// Update callback; more are dropped (partial results are best effort).
const updateRoom = 256

// updateMux receives the partial results and replies of calls that have an
// Update callback on one wildcard subscription, made on first use and kept
// for the connection's life, like nats.go's own request mux. A subscription
// per call would cost a SUB/UNSUB and a 64k-slot channel each.
type updateMux struct {
	nc   *nats.Conn
	next atomic.Uint64 // the last call token

	mu     sync.Mutex
	prefix string // "<inbox>." once subscribed
	calls  map[string]*pendingCall
}

// pendingCall is one call waiting on the mux.
type pendingCall struct {
	updates chan *nats.Msg
	reply   chan *nats.Msg
}

// request publishes msg with a reply subject on the mux and returns the
// reply, handing each partial result that came before it to update, in
// order, on the calling goroutine.
func (m *updateMux) request(ctx context.Context, msg *nats.Msg, maxChars int, update func(tools.Result)) (*nats.Msg, error) {
	token := strconv.FormatUint(m.next.Add(1), 36)
	p := &pendingCall{updates: make(chan *nats.Msg, updateRoom), reply: make(chan *nats.Msg, 1)}
	prefix, err := m.add(token, p)
	if err != nil {
		return nil, err
	}
	defer m.remove(token)
	msg.Reply = prefix + token
	if err := m.nc.PublishMsg(msg); err != nil {
		return nil, err
	}
	deliver := func(u *nats.Msg) {
		if res, err := decodeResult(u.Data, maxChars); err == nil {
			update(res)
		}
	}
	for {
		select {
		case u := <-p.updates:
			deliver(u)
		case r := <-p.reply:
			// The mux queued every earlier partial result before the
			// reply: hand them over first.
			for drained := false; !drained; {
				select {
				case u := <-p.updates:
					deliver(u)
				default:
					drained = true
				}
			}
			if len(r.Data) == 0 && r.Header.Get("Status") == "503" {
				return nil, nats.ErrNoResponders
			}
			return r, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// add registers a call, subscribing on first use, and returns the prefix
// of the call's reply subject.
func (m *updateMux) add(token string, p *pendingCall) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.prefix == "" {
		prefix := m.nc.NewInbox() + "."
		if _, err := m.nc.Subscribe(prefix+"*", m.route); err != nil {
			return "", err
		}
		m.prefix, m.calls = prefix, map[string]*pendingCall{}
	}
	m.calls[token] = p
	return m.prefix, nil
}

func (m *updateMux) remove(token string) {
	m.mu.Lock()
	delete(m.calls, token)
	m.mu.Unlock()
}

// route runs on the subscription's goroutine: it never blocks.
func (m *updateMux) route(msg *nats.Msg) {
	m.mu.Lock()
	p := m.calls[strings.TrimPrefix(msg.Subject, m.prefix)]
	m.mu.Unlock()
	if p == nil {
		return // the call has returned
	}
	ch := p.reply
	if msg.Header.Get(HeaderUpdate) == "1" {
		ch = p.updates
	}
	select {
	case ch <- msg:
	default: // updates beyond updateRoom, or a second reply
	}
}
