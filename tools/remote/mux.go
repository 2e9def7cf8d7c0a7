package remote

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet/tools"
)

// updateRoom is how many partial results of one call may wait for its
// Update callback; more are dropped (partial results are best effort).
const updateRoom = 256

// updateMux receives the messages on the reply subjects of calls (the
// heartbeats and partial results before the reply, and the reply) on one
// wildcard subscription, made on first use and kept for the connection's
// life, like nats.go's own request mux. A subscription per call would
// cost a SUB/UNSUB and a 64k-slot channel each.
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
	beat    chan struct{} // a heartbeat came (one slot: beats only say "alive")
}

// errLost is request's error when the service running the call stopped
// sending heartbeats.
var errLost = errors.New("no heartbeat")

// request publishes msg with a reply subject on the mux and returns the
// reply, handing each partial result that came before it to update (when
// not nil), in order, on the calling goroutine.
//
// Once a heartbeat or a partial result came, the service is known to beat
// (HeaderHeartbeat): a silence of silence then ends the call with errLost.
// Before the first one nothing is assumed (a service of an older version
// never beats, and a call queued behind a busy service's MaxConcurrent
// has not started); the call's context bounds it then.
func (m *updateMux) request(ctx context.Context, msg *nats.Msg, maxChars int, silence time.Duration, update func(tools.Result)) (*nats.Msg, error) {
	token := strconv.FormatUint(m.next.Add(1), 36)
	p := &pendingCall{reply: make(chan *nats.Msg, 1), beat: make(chan struct{}, 1)}
	if update != nil {
		p.updates = make(chan *nats.Msg, updateRoom)
	}
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
	// lost fires after silence without a message, once the first came.
	var live *time.Timer
	var lost <-chan time.Time
	alive := func() {
		if live == nil {
			live = time.NewTimer(silence)
			lost = live.C
			return
		}
		live.Reset(silence)
	}
	defer func() {
		if live != nil {
			live.Stop()
		}
	}()
	for {
		select {
		case <-p.beat:
			alive()
		case u := <-p.updates: // nil without update: never ready
			alive()
			deliver(u)
		case r := <-p.reply:
			// The mux queued every earlier partial result before the
			// reply: hand them over first.
			for drained := p.updates == nil; !drained; {
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
		case <-lost:
			if len(p.beat) > 0 || len(p.updates) > 0 {
				// Messages came while update ran: the service is alive.
				alive()
				continue
			}
			return nil, errLost
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
	switch {
	case msg.Header.Get(HeaderBeat) == "1":
		select {
		case p.beat <- struct{}{}:
		default: // one already waits: it says the same
		}
		return
	case msg.Header.Get(HeaderUpdate) == "1":
		ch = p.updates // nil when the call takes no partial results: dropped below
	}
	select {
	case ch <- msg:
	default: // updates beyond updateRoom, or a second reply
	}
}
