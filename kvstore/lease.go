package kvstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/lanefleet/lanefleet/internal/backoff"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"
)

// LeaseInfo is what a lease value says about its owner.
type LeaseInfo struct {
	Worker   string `msgpack:"worker"`
	Acquired int64  `msgpack:"acquired"` // Unix ms
	// Trigger is the dispatch delivery (inbound stream sequence) the owner
	// keeps un-acked while it holds the lane; 0 for none. A worker that is
	// handed that same message again knows the owner stopped keeping it
	// alive; any other message of a held lane is the owner's to drain.
	Trigger uint64 `msgpack:"trigger,omitempty"`
	// Life is the owner's life in the liveness bucket (Liveness); "" for
	// a worker that keeps none. Workers that find that life over take the
	// lane over at once (Lanes.TakeOver).
	Life string `msgpack:"life,omitempty"`
	// From names the worker declared dead whose lease this one replaced
	// (Lanes.TakeOver); "" for a lease acquired as usual. Such a lease has
	// no trigger: the dead worker's deliveries that come back are the new
	// owner's to drain.
	From string `msgpack:"from,omitempty"`
}

// HeldError is ErrHeld with what the lease says about its holder.
type HeldError struct {
	Holder LeaseInfo
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%v (worker %s)", ErrHeld, e.Holder.Worker)
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// Lease is an acquired lane lease. Its revision is the fencing token of every
// write made through it; Renew and the writes are serialised so a write never
// carries a revision that a concurrent renewal just replaced.
type Lease struct {
	lanes *Lanes
	token string
	value []byte

	// left is the lane's cursor as this process's last release of it
	// left it, when Acquire took the lane back over that release's marker
	// (nothing wrote the lease key since, so nothing wrote the lane's
	// records either: see Left); nil = not known.
	left *Cursor

	mu  sync.RWMutex
	rev uint64
}

// Acquire takes the lease of a lane. It returns ErrHeld (a *HeldError naming
// the holder) only after a leader read has confirmed a live lease: kv.Create
// can report an existing key when a delete marker expires mid-call, and
// trusting that would strand the lane. A
// create that loses a race on a replicated bucket fails with 10164 ("wrong
// last sequence", another write to the key in flight) rather than "key
// exists", and one racing a delete marker returns the raw error; both are
// confirmed the same way, so a lost race is ErrHeld, never an error that
// makes the caller retry a delivery every second.
func (l *Lanes) Acquire(ctx context.Context, token string, info LeaseInfo) (*Lease, error) {
	val, err := msgpack.Marshal(info)
	if err != nil {
		return nil, err
	}
	key := leaseKey(token)
	if marker, left := l.released.take(token, time.Now(), l.cfg.MarkerTTL); marker != 0 {
		// This process released the lane last: if its marker is still the
		// key's last message, nobody took the lane since, and one write
		// takes it (kv.Create would first fail on the marker, then read it).
		ack, err := l.js.Publish(ctx, l.prefix+key, val,
			jetstream.WithExpectLastSequencePerSubject(marker), jetstream.WithMsgTTL(l.cfg.LeaseTTL))
		if err == nil {
			// Only this expectation met proves the lane untouched since
			// the release: left is handed on (Left) on this path alone.
			return &Lease{lanes: l, token: token, value: val, rev: ack.Sequence, left: left}, nil
		}
		if busy, mismatch := WriteConflict(err); !busy && !mismatch {
			return nil, fmt.Errorf("kvstore: acquire %s: %w", token, err)
		}
		// The key moved on since the release: decide as for any lane.
	}
	for attempt := 0; ; attempt++ {
		rev, err := l.kv.Create(ctx, key, val, jetstream.KeyTTL(l.cfg.LeaseTTL))
		if err == nil {
			return &Lease{lanes: l, token: token, value: val, rev: rev}, nil
		}
		busy, mismatch := WriteConflict(err)
		if !busy && !mismatch {
			return nil, fmt.Errorf("kvstore: acquire %s: %w", token, err)
		}
		if busy {
			// The competing write is not applied yet: give it a moment,
			// or the confirming read below finds the key still free.
			if err := pause(ctx, attempt); err != nil {
				return nil, fmt.Errorf("kvstore: acquire %s: %w", token, err)
			}
		}
		e, gerr := l.kv.Get(ctx, key)
		switch {
		case gerr == nil && e.Operation() == jetstream.KeyValuePut:
			held := &HeldError{}
			_ = decode(e.Key(), e.Revision(), e.Value(), &held.Holder) // an unreadable value is still a held lease
			return nil, held
		case gerr != nil && !errors.Is(gerr, jetstream.ErrKeyNotFound) && !errors.Is(gerr, jetstream.ErrKeyDeleted):
			return nil, fmt.Errorf("kvstore: confirm lease %s: %w", token, gerr)
		}
		if attempt >= maxConflicts {
			return nil, fmt.Errorf("kvstore: acquire %s: lease neither held nor creatable after %d tries: %w", token, attempt+1, err)
		}
	}
}

// maxConflicts bounds the retries of one lease operation that keeps meeting
// concurrent writes to its key.
const maxConflicts = 8

// conflictBackoff is the wait before retrying a conflicting write: about
// one replicated write's time at first, 2ms longer each retry, never more
// than 50ms.
var conflictBackoff = backoff.Policy{Base: 2 * time.Millisecond, Max: 50 * time.Millisecond, Linear: true}

// pause waits before retry attempt+1 of a conflicting write; it returns
// ctx's error when ctx ends first.
func pause(ctx context.Context, attempt int) error {
	if conflictBackoff.Wait(ctx, attempt+1) != nil {
		return ctx.Err()
	}
	return nil
}

// writeConflict sorts a failed conditional write. busy: 10164, the server
// refused it because another write with an expectation on the same subject
// was still in flight (replicated streams only); it says nothing about the
// expectation, and a retry gets a real answer. mismatch: 10071 (or the KV
// errors made of it), the subject's last sequence is not the one expected.
// On nats-server v2.15 a stale expectation is 10071 on every replica count.
func WriteConflict(err error) (busy, mismatch bool) {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jetstream.JSErrCodeStreamWrongLastSequenceConstant:
			return true, false
		case jetstream.JSErrCodeStreamWrongLastSequence:
			return false, true
		}
	}
	return false, errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// Transient reports whether err is a store error that passes on its own: a
// stream that had no leader or did not answer in time (a leader change, a
// node restarting), a server whose JetStream was not up yet, or a connection
// that was down. Such a failure says nothing about what was written or
// read: the lanes retry it later and never count it against a message
// (lanes Config.MaxAttempts). A refusal (a conflict, a message too large, a
// full stream, a stream that does not exist) is not transient.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jsClusterNotAvail, jsClusterNotLeader, jsStreamOffline, jetstream.JSErrCodeJetStreamNotEnabled:
			return true
		}
		return false
	}
	for _, t := range []error{context.DeadlineExceeded, nats.ErrTimeout, nats.ErrNoResponders, jetstream.ErrNoStreamResponse,
		nats.ErrConnectionClosed, nats.ErrConnectionReconnecting, nats.ErrDisconnected, nats.ErrConnectionDraining} {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// JetStream error codes of a cluster that cannot take a request right now
// (nats-server errors.json), which nats.go names no constant for.
const (
	jsClusterNotAvail  jetstream.ErrorCode = 10008 // JetStream system temporarily unavailable
	jsClusterNotLeader jetstream.ErrorCode = 10009 // JetStream cluster can not handle request
	jsStreamOffline    jetstream.ErrorCode = 10118 // stream is offline
)

// Holder returns the current holder of a lane's lease, or ok=false. A lease
// whose value does not decode is held (ok=true) by an unknown owner, with a
// *CorruptError.
func (l *Lanes) Holder(ctx context.Context, token string) (info LeaseInfo, ok bool, err error) {
	e, err := l.kv.Get(ctx, leaseKey(token))
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return LeaseInfo{}, false, nil
	}
	if err != nil {
		return LeaseInfo{}, false, fmt.Errorf("kvstore: holder %s: %w", token, err)
	}
	if err := decode(e.Key(), e.Revision(), e.Value(), &info); err != nil {
		return LeaseInfo{}, true, err
	}
	return info, true, nil
}

// Revision returns the current fencing token.
func (s *Lease) Revision() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rev
}

// Renew extends the lease by the lease TTL. ErrLeaseLost means another owner
// may have taken the lane: stop work at once.
func (s *Lease) Renew(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	// kv.Update would drop the per-key TTL (nats.go#1994), so renewal is a
	// raw publish that both checks the revision and sets the TTL again.
	return s.fenced(ctx, "renew", func(rev uint64) error {
		ack, err := s.lanes.js.Publish(ctx, s.lanes.prefix+leaseKey(s.token), s.value,
			jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(s.lanes.cfg.LeaseTTL))
		if err == nil {
			s.rev = ack.Sequence
		}
		return err
	})
}

// Release gives the lease up: a purge marker (as kv.Purge writes it, with
// the marker TTL) expecting the lease's revision. Releasing a lease that is
// already lost is not an error. The marker's revision is remembered, so
// this process's next Acquire of the lane takes it in one write.
func (s *Lease) Release(ctx context.Context) error { return s.release(ctx, true, nil) }

// ReleaseAt is Release by an owner that knows the lane's cursor as it
// leaves it: left must be what Cursor would read now (the newest record
// the owner committed or read, with no fenced write of its own whose
// outcome it does not know). This process's next Acquire that takes the
// lane back over this release's marker hands left on (Left).
func (s *Lease) ReleaseAt(ctx context.Context, left Cursor) error {
	return s.release(ctx, true, &left)
}

// Left returns the lane's cursor as this process's last release of it
// (ReleaseAt) left it, when Acquire took the lane back over that
// release's marker: ok is true only then. The write that took it expected
// the marker as the lease key's last message, so nobody held the lane in
// between, and the lane's records, written only under the lease (fenced on
// the lease key's revision, which no lease holds at a marker), are as the
// release left them: the cursor need not be read again. A lease taken any
// other way (created, the marker gone or written over, a release that
// named no cursor) has ok false, and its owner reads the cursor.
func (s *Lease) Left() (Cursor, bool) {
	if s.left == nil {
		return Cursor{}, false
	}
	return *s.left, true
}

// GiveUp is Release for a lease whose worker's life ended (declared
// dead): its marker is not remembered, so this process takes the lane
// again no faster than any other. The survivors, told of the death at
// once, are the ones meant to take its lanes.
func (s *Lease) GiveUp(ctx context.Context) error { return s.release(ctx, false, nil) }

// release writes the purge marker; with remember, its revision (and left,
// the cursor the owner leaves, nil: not known) is kept for this process's
// next Acquire of the lane.
func (s *Lease) release(ctx context.Context, remember bool, left *Cursor) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var marker uint64
	err := s.fenced(ctx, "release", func(rev uint64) error {
		m := nats.NewMsg(s.lanes.prefix + leaseKey(s.token))
		m.Header.Set(kvOperation, kvPurge)
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
		ack, err := s.lanes.js.PublishMsg(ctx, m, jetstream.WithMsgTTL(s.lanes.cfg.MarkerTTL))
		if err == nil {
			marker = ack.Sequence
		}
		return err
	})
	if errors.Is(err, ErrLeaseLost) {
		return nil
	}
	if err == nil && remember {
		s.lanes.released.put(s.token, marker, time.Now(), left)
	}
	return err
}

// The KV operation header of a purge marker (nats.go's kv.Purge).
const (
	kvOperation = "KV-Operation"
	kvPurge     = "PURGE"
)

// releasedMax bounds the lanes whose release marker a process remembers.
const releasedMax = 4096

// releasedRevs remembers, per lane, the revision of the purge marker this
// process's last Release of it wrote, when, and the cursor that release
// named (ReleaseAt), for at most releasedMax
// lanes (a full table forgets one lane for each new one). Acquire takes the
// lane's out and expects it while the marker may still live (MarkerTTL): a
// remembered revision that is no longer the lease key's last message only
// costs that one refused write, which an expired marker would make certain.
type releasedRevs struct {
	mu  sync.Mutex
	rev map[string]releasedRev
}

type releasedRev struct {
	rev  uint64
	at   time.Time
	left *Cursor // nil: the release named no cursor
}

func (r *releasedRevs) put(token string, rev uint64, now time.Time, left *Cursor) {
	if r == nil || rev == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rev == nil {
		r.rev = make(map[string]releasedRev)
	}
	if _, ok := r.rev[token]; !ok && len(r.rev) >= releasedMax {
		for t := range r.rev {
			delete(r.rev, t)
			break
		}
	}
	r.rev[token] = releasedRev{rev, now, left}
}

// take returns the lane's remembered marker revision (0: none, or one
// written ttl or longer before now: the marker is gone) and the cursor its
// release named (nil: none), and forgets them.
func (r *releasedRevs) take(token string, now time.Time, ttl time.Duration) (uint64, *Cursor) {
	if r == nil {
		return 0, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.rev[token]
	if !ok {
		return 0, nil
	}
	delete(r.rev, token)
	if now.Sub(m.at) >= ttl {
		return 0, nil
	}
	return m.rev, m.left
}

// put writes key under the fence: the server stores it only while the lease
// subject's last sequence is our revision. It returns the write's stream
// sequence.
func (s *Lease) put(ctx context.Context, key string, data []byte) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var seq uint64
	err := s.fenced(ctx, "write "+key, func(rev uint64) error {
		ack, err := s.lanes.js.Publish(ctx, s.lanes.prefix+key, data,
			jetstream.WithExpectLastSequenceForSubject(rev, s.lanes.prefix+leaseKey(s.token)))
		if err == nil {
			seq = ack.Sequence
		}
		return err
	})
	return seq, err
}

// fenced runs one write conditioned on the lease's revision (s.mu held) and
// settles what a refusal means:
//   - busy (another write to the lease key in flight, e.g. a worker trying
//     to acquire the lane): retried, since it says nothing about the lease;
//   - mismatch: the lease key moved on. If it still holds our value, the
//     move was our own renewal whose answer we never got (a timeout during a
//     leader change): adopt its revision and write again. Otherwise the
//     lease is lost (ErrLeaseLost).
func (s *Lease) fenced(ctx context.Context, op string, write func(rev uint64) error) error {
	for attempt := 0; ; attempt++ {
		err := write(s.rev)
		if err == nil {
			return nil
		}
		busy, mismatch := WriteConflict(err)
		switch {
		case busy && attempt < maxConflicts:
			if perr := pause(ctx, attempt); perr != nil {
				return fmt.Errorf("kvstore: %s %s: %w", op, s.token, err)
			}
			continue
		case mismatch && attempt < maxConflicts:
			if rev, ours := s.current(ctx); ours && rev != s.rev {
				s.rev = rev
				continue
			}
			return fmt.Errorf("%w: %s: %s refused: %v", ErrLeaseLost, s.token, op, err)
		}
		return fmt.Errorf("kvstore: %s %s: %w", op, s.token, err)
	}
}

// current reads the lease key on the leader and reports its revision and
// whether it still holds this lease's value.
func (s *Lease) current(ctx context.Context) (rev uint64, ours bool) {
	e, err := s.lanes.kv.Get(ctx, leaseKey(s.token))
	if err != nil || e.Operation() != jetstream.KeyValuePut {
		return 0, false
	}
	return e.Revision(), bytes.Equal(e.Value(), s.value)
}

// RenewEvery is how often an owner should renew: a third of the TTL.
func (l *Lanes) RenewEvery() time.Duration { return l.cfg.LeaseTTL / 3 }

// LeaseState is what a lane's lease key says now, for a person asking who
// runs the lane: the lease in force and how its holder keeps it, or that
// the last one lapsed.
type LeaseState struct {
	// Held: a lease is in force, Holder's (a zero Holder when its value
	// does not read).
	Held   bool
	Holder LeaseInfo
	// Renewed is the lease's last write (its acquisition or its latest
	// renewal), by the NATS server's clock; TTL is its lifetime from then.
	Renewed time.Time
	TTL     time.Duration
	// Lapsed is, while no lease is in force, when the last one lapsed
	// unreleased: its holder stopped renewing it and the key's TTL ran
	// out. It is zero when the lane was released or never held, and once
	// the lapse's marker is gone (the bucket's MarkerTTL after it).
	Lapsed time.Time
}

// Expires returns when a held lease lapses unless it is renewed.
func (s LeaseState) Expires() time.Time { return s.Renewed.Add(s.TTL) }

// Overdue reports whether a held lease missed its renewals by now: its
// holder renews it every third of the TTL (RenewEvery), so one not renewed
// for half the TTL has stopped answering (a dead or frozen worker, a lost
// connection), and another worker takes the lane once it lapses
// (Expires).
func (s LeaseState) Overdue(now time.Time) bool {
	return s.Held && s.TTL > 0 && now.Sub(s.Renewed) > s.TTL/2
}

// Holding says how the worker a run registry entry names (RunInfo.Worker)
// holds the run's lane now.
type Holding string

// Holdings.
const (
	// HoldingLive: the worker holds the lane's lease and renews it.
	HoldingLive Holding = "live"
	// HoldingUnresponsive: the worker holds the lease but missed its
	// renewals (LeaseState.Overdue): it stopped answering, and another
	// worker takes the run over once the lease lapses.
	HoldingUnresponsive Holding = "unresponsive"
	// HoldingLapsed: the worker holds the lane no more (its lease lapsed,
	// or another worker holds the lane now) though the entry says it runs:
	// the entry outlived its worker, and the run starts again when a
	// worker takes the lane.
	HoldingLapsed Holding = "lapsed"
)

// HeldBy says how worker holds the lane whose lease is s at now.
func (s LeaseState) HeldBy(worker string, now time.Time) Holding {
	switch {
	case !s.Held || s.Holder.Worker != worker:
		return HoldingLapsed
	case s.Overdue(now):
		return HoldingUnresponsive
	}
	return HoldingLive
}

// Lease returns the state of the lane's lease: unlike Holder, with when it
// was last renewed, for how long, and whether the last one lapsed. It
// decides nothing: ownership goes by Acquire and the fenced writes.
func (l *Lanes) Lease(ctx context.Context, token string) (LeaseState, error) {
	raw, err := l.stream.GetLastMsgForSubject(ctx, l.prefix+leaseKey(token))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return LeaseState{}, nil
	}
	if err != nil {
		return LeaseState{}, fmt.Errorf("kvstore: lease %s: %w", token, err)
	}
	return l.leaseState(raw.Subject, raw.Sequence, raw.Time, raw.Header, raw.Data)
}

// leaseState reads the last message of a lease key (its subject,
// sequence, time, headers and data).
func (l *Lanes) leaseState(subject string, seq uint64, at time.Time, h nats.Header, data []byte) (LeaseState, error) {
	switch {
	case h.Get("KV-Operation") != "":
		return LeaseState{}, nil // released (a purge) or deleted
	case h.Get(jetstream.MarkerReasonHeader) == "MaxAge":
		return LeaseState{Lapsed: at}, nil
	case h.Get(jetstream.MarkerReasonHeader) != "":
		return LeaseState{}, nil
	}
	st := LeaseState{Held: true, Renewed: at, TTL: l.cfg.LeaseTTL}
	if ttl, ok := parseTTL(h.Get(jetstream.MsgTTLHeader)); ok {
		st.TTL = ttl // the writer's: this reader's configuration may differ
	}
	if err := decode(subject, seq, data, &st.Holder); err != nil {
		return st, err
	}
	return st, nil
}

// parseTTL reads a Nats-TTL header: a Go duration ("30s", as nats.go
// writes it) or whole seconds.
func parseTTL(h string) (time.Duration, bool) {
	if d, err := time.ParseDuration(h); err == nil && d > 0 {
		return d, true
	}
	if n, err := strconv.ParseInt(h, 10, 64); err == nil && n > 0 && n < 1<<32 {
		return time.Duration(n) * time.Second, true
	}
	return 0, false
}
