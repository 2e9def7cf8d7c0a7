package budgetstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/governance"
	"github.com/lanefleet/lanefleet/internal/backoff"
	"github.com/lanefleet/lanefleet/internal/kvbucket"
)

// Defaults.
const (
	// DefaultBucket is the KV bucket of the budgets.
	DefaultBucket = "budgets"
	// DefaultMaxBytes caps the bucket.
	DefaultMaxBytes = 64 << 20
	// MaxAttempts bounds the compare-and-set attempts of one update.
	MaxAttempts = 50
)

// Key prefixes: tenant.<name>, session.<lane token>, agent.<id>,
// profile.<id as a lane token>, rate.<pattern as a lane token>.
const (
	tenantPrefix  = "tenant."
	sessionPrefix = "session."
	agentPrefix   = "agent."
	profilePrefix = "profile."
	ratePrefix    = "rate."
)

// ErrConflict means an update lost the compare-and-set race MaxAttempts
// times in a row; nothing was changed.
var ErrConflict = errors.New("budgetstore: too many concurrent updates")

// BucketConfig configures a Bucket.
type BucketConfig struct {
	Bucket   string // default DefaultBucket
	Replicas int    // when the bucket is created; default 1
	MaxBytes int64  // default DefaultMaxBytes, -1 = none
	Now      func() time.Time
}

func (c BucketConfig) withDefaults() BucketConfig {
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	c.Replicas = max(c.Replicas, 1)
	switch {
	case c.MaxBytes == 0:
		c.MaxBytes = DefaultMaxBytes
	case c.MaxBytes < 0:
		c.MaxBytes = -1
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Bucket is the budgets bucket.
type Bucket struct {
	kv  jetstream.KeyValue
	js  jetstream.JetStream
	cfg BucketConfig
}

// OpenBucket creates the bucket when it is missing, or binds to it. It
// returns the KV error, wrapped.
func OpenBucket(ctx context.Context, js jetstream.JetStream, cfg BucketConfig) (*Bucket, error) {
	cfg = cfg.withDefaults()
	kv, err := kvbucket.Open(ctx, js, jetstream.KeyValueConfig{
		Bucket:      cfg.Bucket,
		Description: "Lanefleet budgets: limits, use, reservations in flight",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		MaxBytes:    cfg.MaxBytes,
	})
	if err != nil {
		return nil, fmt.Errorf("budgetstore: open bucket %s: %w", cfg.Bucket, err)
	}
	return &Bucket{kv: kv, js: js, cfg: cfg}, nil
}

// Key is the bucket key of a scope's budget.
func Key(s governance.Scope) (string, error) {
	if err := s.Validate(); err != nil {
		return "", err
	}
	switch s.Kind {
	case governance.ScopeTenant:
		return tenantPrefix + s.Name, nil
	case governance.ScopeAgent:
		return agentPrefix + s.Name, nil
	}
	tok, err := events.KeyToken(s.Name)
	if err != nil {
		return "", fmt.Errorf("%w: %w", governance.ErrBadScope, err)
	}
	switch s.Kind {
	case governance.ScopeRate:
		return ratePrefix + tok, nil
	case governance.ScopeProfile:
		return profilePrefix + tok, nil
	}
	return sessionPrefix + tok, nil
}

// scopeOf is the scope a bucket key names.
func scopeOf(key string) (governance.Scope, bool) {
	if name, ok := strings.CutPrefix(key, tenantPrefix); ok {
		s := governance.Scope{Kind: governance.ScopeTenant, Name: name}
		return s, s.Validate() == nil
	}
	if name, ok := strings.CutPrefix(key, agentPrefix); ok {
		s := governance.Scope{Kind: governance.ScopeAgent, Name: name}
		return s, s.Validate() == nil
	}
	if tok, ok := strings.CutPrefix(key, profilePrefix); ok {
		k, err := events.TokenKey(tok)
		s := governance.Scope{Kind: governance.ScopeProfile, Name: k}
		return s, err == nil && s.Validate() == nil
	}
	if tok, ok := strings.CutPrefix(key, sessionPrefix); ok {
		k, err := events.TokenKey(tok)
		return governance.Scope{Kind: governance.ScopeSession, Name: k}, err == nil
	}
	if tok, ok := strings.CutPrefix(key, ratePrefix); ok {
		k, err := events.TokenKey(tok)
		s := governance.Scope{Kind: governance.ScopeRate, Name: k}
		return s, err == nil && s.Validate() == nil
	}
	return governance.Scope{}, false
}

// Get reads a scope's budget; found is false when it has none.
func (b *Bucket) Get(ctx context.Context, s governance.Scope) (st governance.State, found bool, err error) {
	key, err := Key(s)
	if err != nil {
		return governance.State{}, false, err
	}
	st, rev, err := b.read(ctx, key)
	if _, ok := errors.AsType[*UnreadableError](err); ok {
		return governance.State{}, true, err
	}
	if err != nil {
		return governance.State{}, false, fmt.Errorf("budgetstore: get %s: %w", s, err)
	}
	return st, rev != 0, nil
}

// UnreadableError is a budget whose stored value does not decode (or
// holds limits that are not valid). Its sessions' calls are refused, not
// made unlimited, until an operator sets the budget again (Set
// overwrites it).
type UnreadableError struct {
	Scope       governance.Scope
	Bucket, Key string
	Err         error
}

func (e *UnreadableError) Error() string {
	return fmt.Sprintf("budgetstore: the %s budget (key %s of bucket %s) is unreadable: %v", e.Scope, e.Key, e.Bucket, e.Err)
}

func (e *UnreadableError) Unwrap() error { return e.Err }

// unreadable is the UnreadableError of key's value.
func (b *Bucket) unreadable(key string, err error) *UnreadableError {
	sc, _ := scopeOf(key)
	return &UnreadableError{Scope: sc, Bucket: b.cfg.Bucket, Key: key, Err: err}
}

// read is a key's state and revision; 0 when it has none. A value that
// does not decode is an *UnreadableError, with its revision.
func (b *Bucket) read(ctx context.Context, key string) (governance.State, uint64, error) {
	e, err := b.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return governance.State{}, 0, nil
	}
	if err != nil {
		return governance.State{}, 0, err
	}
	st, err := decode(e.Value())
	if err != nil {
		return governance.State{}, e.Revision(), b.unreadable(key, err)
	}
	return st, e.Revision(), nil
}

// readOver is read, an unreadable value read as no budget (for an
// operator's Set, which overwrites it).
func (b *Bucket) readOver(ctx context.Context, key string, overwrite bool) (governance.State, uint64, error) {
	st, rev, err := b.read(ctx, key)
	if _, ok := errors.AsType[*UnreadableError](err); ok && overwrite {
		return governance.State{}, rev, nil
	}
	return st, rev, err
}

// maxValue bounds a stored state.
const maxValue = 1 << 20

func decode(data []byte) (governance.State, error) {
	var st governance.State
	if len(data) > maxValue {
		return st, fmt.Errorf("budgetstore: value of %d bytes", len(data))
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return governance.State{}, err
	}
	if err := st.Limits.Validate(); err != nil {
		return governance.State{}, err
	}
	return st, nil
}

// casBackoff is the wait of a writer that lost a compare-and-set to
// another: a random time in (0, min(50ms, 1ms·2^(n−1))].
var casBackoff = backoff.Policy{Base: time.Millisecond, Max: 50 * time.Millisecond, Jitter: true}

// errNoChange makes an update write nothing.
var errNoChange = errors.New("no change")

// update applies fn to the key's latest state (cur: what the caller
// believes it is, with its revision; rev 0 reads first) and writes the
// result with compare-and-set, retrying on a fresh read when another
// writer got there first. fn may return errNoChange (nothing written, nil
// returned) or another error (nothing written, returned as is, with the
// state fn was given). A value that does not decode is an
// *UnreadableError, unless overwrite is set: then fn gets no budget.
func (b *Bucket) update(ctx context.Context, key string, cur governance.State, rev uint64, overwrite bool, fn func(st *governance.State, now time.Time) error) (governance.State, uint64, error) {
	read := func() (governance.State, uint64, error) { return b.readOver(ctx, key, overwrite) }
	fresh := rev == 0
	if fresh {
		var err error
		if cur, rev, err = read(); err != nil {
			return governance.State{}, 0, err
		}
	}
	return casUpdate(ctx, b, key, cur, rev, fresh, read, fn)
}

// casUpdate is the compare-and-set loop of update and updateQuota: fn on
// cur (at revision rev, 0 for no value; fresh when just read), its result
// created or updated by revision, and on a lost race a new read — at once
// when cur was not fresh, after casBackoff when it was — and another try,
// MaxAttempts in all. fn may return errNoChange (nothing written, cur
// returned) or another error (nothing written, returned as is, with the
// state fn was given).
func casUpdate[S any](ctx context.Context, b *Bucket, key string, cur S, rev uint64, fresh bool, read func() (S, uint64, error), fn func(*S, time.Time) error) (S, uint64, error) {
	var zero S
	for n := 1; n <= MaxAttempts; n++ {
		next := cur
		if err := fn(&next, b.cfg.Now()); err != nil {
			if errors.Is(err, errNoChange) {
				return cur, rev, nil
			}
			return next, rev, err
		}
		data, err := json.Marshal(next)
		if err != nil {
			return zero, 0, err
		}
		var nrev uint64
		if rev == 0 {
			nrev, err = b.kv.Create(ctx, key, data)
		} else {
			nrev, err = b.kv.Update(ctx, key, data, rev)
		}
		if err == nil {
			return next, nrev, nil
		}
		if !isConflict(err) {
			return zero, 0, err
		}
		if !fresh {
			fresh = true // the cached value was stale: read, retry at once
		} else if err := casBackoff.Wait(ctx, n); err != nil {
			return zero, 0, err
		}
		if cur, rev, err = read(); err != nil {
			return zero, 0, err
		}
	}
	return zero, 0, fmt.Errorf("%w (%d attempts)", ErrConflict, MaxAttempts)
}

// isConflict reports a lost compare-and-set.
func isConflict(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Set gives a scope's budget new limits, keeping what its window used and
// the reservations in flight, and ends its pause (the next refusal pauses
// it again). An unreadable budget is overwritten. The change is audited as who's (Audit). It returns the state
// before and after.
func (b *Bucket) Set(ctx context.Context, s governance.Scope, l governance.Limits, who string) (old, now governance.State, err error) {
	if err := l.Validate(); err != nil {
		return old, now, err
	}
	return b.change(ctx, s, "set", who, func(st *governance.State, t time.Time) {
		if st.Limits.Window != l.Window {
			// A new window counts from now.
			st.Used, st.Slots, st.Start = governance.Amount{}, nil, 0
		}
		st.Limits, st.Refused = l, nil
		st.Roll(t)
	})
}

// Reset forgets what a scope's budget used (its limits and the
// reservations in flight stay) and ends its pause, audited as who's.
func (b *Bucket) Reset(ctx context.Context, s governance.Scope, who string) (old, now governance.State, err error) {
	return b.change(ctx, s, "reset", who, func(st *governance.State, t time.Time) {
		st.Used, st.Slots, st.Refused = governance.Amount{}, nil, nil
		st.Roll(t)
	})
}

// change applies an operator's change and audits it. A change that was
// made but not audited returns the audit's error.
func (b *Bucket) change(ctx context.Context, s governance.Scope, op, who string, fn func(*governance.State, time.Time)) (old, now governance.State, err error) {
	key, err := Key(s)
	if err != nil {
		return old, now, err
	}
	now, _, err = b.update(ctx, key, governance.State{}, 0, op == "set", func(st *governance.State, t time.Time) error {
		old = *st
		fn(st, t)
		return nil
	})
	if err != nil {
		return governance.State{}, governance.State{}, fmt.Errorf("budgetstore: %s %s: %w", op, s, err)
	}
	err = b.Audit(ctx, AuditRecord{At: b.cfg.Now().UTC(), Who: who, Op: op, Scope: s, Old: old, New: now})
	return old, now, err
}

// Remove takes a scope's limits away (its calls are no longer limited; what
// its window used stays on record) and ends its pause, audited as who's.
func (b *Bucket) Remove(ctx context.Context, s governance.Scope, who string) (old, now governance.State, err error) {
	return b.change(ctx, s, "remove", who, func(st *governance.State, t time.Time) {
		st.Limits, st.Refused = governance.Limits{}, nil
		st.Roll(t)
	})
}

// MaxList bounds the budgets List lists.
const MaxList = 1000

// List lists the scopes of the given kinds that have a budget record (at
// most MaxList, by kind in the order given, then in the bucket's order).
func (b *Bucket) List(ctx context.Context, kinds ...governance.ScopeKind) ([]governance.Scope, error) {
	prefix := map[governance.ScopeKind]string{governance.ScopeTenant: tenantPrefix, governance.ScopeSession: sessionPrefix,
		governance.ScopeAgent: agentPrefix, governance.ScopeProfile: profilePrefix, governance.ScopeRate: ratePrefix}
	var out []governance.Scope
	for _, k := range kinds {
		p, ok := prefix[k]
		if !ok {
			return nil, fmt.Errorf("%w: kind %.20q", governance.ErrBadScope, k)
		}
		l, err := b.kv.ListKeysFiltered(ctx, p+"*")
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("budgetstore: list %s budgets: %w", k, err)
		}
		for key := range l.Keys() {
			if sc, ok := scopeOf(key); ok && len(out) < MaxList {
				out = append(out, sc)
			}
		}
		_ = l.Stop()
	}
	return out, nil
}
