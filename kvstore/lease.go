package kvstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"
)

// LeaseInfo is what a lease value says about its owner.
type LeaseInfo struct {
	Worker   string `msgpack:"worker"`
	Acquired int64  `msgpack:"acquired"` // Unix ms
}

// Lease is an acquired lane lease. Its revision is the fencing token of every
// write made through it; Renew and the writes are serialised so a write never
// carries a revision that a concurrent renewal just replaced.
type Lease struct {
	lanes *Lanes
	token string
	value []byte

	mu  sync.RWMutex
	rev uint64
}

// Acquire takes the lease of a lane. It returns ErrHeld only after a leader
// read has confirmed a live lease: kv.Create can report an existing key when a
// delete marker expires mid-call, and trusting that would strand the lane.
func (l *Lanes) Acquire(ctx context.Context, token string, info LeaseInfo) (*Lease, error) {
	val, err := msgpack.Marshal(info)
	if err != nil {
		return nil, err
	}
	key := leaseKey(token)
	for attempt := 0; ; attempt++ {
		rev, err := l.kv.Create(ctx, key, val, jetstream.KeyTTL(l.cfg.LeaseTTL))
		if err == nil {
			return &Lease{lanes: l, token: token, value: val, rev: rev}, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("kvstore: acquire %s: %w", token, err)
		}
		e, gerr := l.kv.Get(ctx, key)
		switch {
		case gerr == nil && e.Operation() == jetstream.KeyValuePut:
			return nil, ErrHeld
		case gerr != nil && !errors.Is(gerr, jetstream.ErrKeyNotFound) && !errors.Is(gerr, jetstream.ErrKeyDeleted):
			return nil, fmt.Errorf("kvstore: confirm lease %s: %w", token, gerr)
		}
		if attempt >= 3 {
			return nil, fmt.Errorf("kvstore: acquire %s: lease neither held nor creatable after %d tries: %w", token, attempt+1, err)
		}
	}
}

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

// Token returns the lane token.
func (s *Lease) Token() string { return s.token }

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
	ack, err := s.lanes.js.Publish(ctx, s.lanes.prefix+leaseKey(s.token), s.value,
		jetstream.WithExpectLastSequencePerSubject(s.rev), jetstream.WithMsgTTL(s.lanes.cfg.LeaseTTL))
	if err != nil {
		if isWrongLastSeq(err) {
			return fmt.Errorf("%w: %s: %v", ErrLeaseLost, s.token, err)
		}
		return fmt.Errorf("kvstore: renew %s: %w", s.token, err)
	}
	s.rev = ack.Sequence
	return nil
}

// Release gives the lease up. Releasing a lease that is already lost is not
// an error.
func (s *Lease) Release(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.lanes.kv.Purge(ctx, leaseKey(s.token), jetstream.LastRevision(s.rev), jetstream.PurgeTTL(s.lanes.cfg.MarkerTTL))
	if err != nil && !isWrongLastSeq(err) {
		return fmt.Errorf("kvstore: release %s: %w", s.token, err)
	}
	return nil
}

// put writes key under the fence: the server stores it only while the lease
// subject's last sequence is our revision.
func (s *Lease) put(ctx context.Context, key string, data []byte) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, err := s.lanes.js.Publish(ctx, s.lanes.prefix+key, data,
		jetstream.WithExpectLastSequenceForSubject(s.rev, s.lanes.prefix+leaseKey(s.token)))
	if err != nil {
		if isWrongLastSeq(err) {
			return fmt.Errorf("%w: %s: fenced write of %s rejected", ErrLeaseLost, s.token, key)
		}
		return fmt.Errorf("kvstore: write %s: %w", key, err)
	}
	return nil
}

// RenewEvery is how often an owner should renew: a third of the TTL.
func (l *Lanes) RenewEvery() time.Duration { return l.cfg.LeaseTTL / 3 }
