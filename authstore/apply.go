package authstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/internal/backoff"
)

// Apply records ev for profileID and returns the profile's new state. It
// reads the latest state (the in-memory copy first, the bucket after a lost
// race), clears its expired windows, applies ev with Config.Auth.Apply and
// writes the result with compare-and-swap on the key's revision, retrying on
// a fresh value up to Config.MaxAttempts times; so concurrent Applies from
// any number of workers each count exactly once. Nothing is written when ev
// changes nothing (a failure of an OpenRouter profile). The new state is
// visible to this Store's readers when Apply returns and to other workers'
// Stores once their watchers deliver it.
//
// Apply returns ErrConflict when it kept losing the race, ErrClosed after
// Close, and otherwise the KV error, wrapped.
func (s *Store) Apply(ctx context.Context, profileID string, ev authprofile.Event) (authprofile.State, error) {
	st, _, err := s.update(ctx, profileID, func(cur authprofile.State, now time.Time) (authprofile.State, bool) {
		return s.cfg.Auth.Apply(cur, ev, now), true
	})
	if err != nil {
		return authprofile.State{}, fmt.Errorf("authstore: apply %s to %s: %w", ev.Kind, profileID, err)
	}
	return st, nil
}

// ClaimProbe claims the probe of a cooling profile that Select offered
// (Selection.Probe): it records an authprofile.EventProbe only while
// Config.Auth.CanProbe still holds on the latest state, under
// compare-and-swap, so of all workers offered the same probe exactly one
// wins. won is false when another worker claimed it first or the profile no
// longer needs probing; then select again.
func (s *Store) ClaimProbe(ctx context.Context, profileID, prov, model string) (won bool, err error) {
	_, won, err = s.update(ctx, profileID, func(cur authprofile.State, now time.Time) (authprofile.State, bool) {
		if !s.cfg.Auth.CanProbe(prov, cur, model, now) {
			return cur, false
		}
		return s.cfg.Auth.Apply(cur, authprofile.Event{Kind: authprofile.EventProbe, Provider: prov, Model: model}, now), true
	})
	if err != nil {
		return false, fmt.Errorf("authstore: claim probe of %s: %w", profileID, err)
	}
	return won, nil
}

// MarkGood records profileID as the last good profile of prov (the exact
// provider string, as the reference does). The last writer wins; nothing is
// written when the Store already holds the same value. lastGood is
// informational: ordering never uses it. MarkGood returns ErrClosed after
// Close, and otherwise the KV error, wrapped.
func (s *Store) MarkGood(ctx context.Context, prov, profileID string) error {
	if s.closing.Load() {
		return ErrClosed
	}
	if profileID == "" {
		return fmt.Errorf("authstore: mark good %s: empty profile id", prov)
	}
	key, err := goodKey(prov)
	if err != nil {
		return err
	}
	if cur, ok := s.LastGood(prov); ok && cur == profileID {
		return nil
	}
	data, err := json.Marshal(profileID)
	if err != nil {
		return fmt.Errorf("authstore: mark good %s: %w", prov, err)
	}
	rev, err := s.kv.Put(ctx, key, data)
	if err != nil {
		return fmt.Errorf("authstore: mark good %s: %w", prov, err)
	}
	s.cache.setGood(key, prov, profileID, rev)
	s.cache.publish()
	return nil
}

// mutation computes a profile's next state from its current one (expired
// windows already cleared); ok false means "write nothing".
type mutation func(cur authprofile.State, now time.Time) (next authprofile.State, ok bool)

// update runs fn on profileID's latest state and stores the result with
// compare-and-swap. It starts from the in-memory copy, which is usually
// current; a lost race, or a decision not to write, is checked against a
// fresh read of the key before it is final. Local updates of one key queue
// on a lock, so they never race each other, only other workers.
func (s *Store) update(ctx context.Context, profileID string, fn mutation) (authprofile.State, bool, error) {
	if s.closing.Load() {
		return authprofile.State{}, false, ErrClosed
	}
	key, err := profileKey(profileID)
	if err != nil {
		return authprofile.State{}, false, err
	}
	unlock, err := s.lock(ctx, key)
	if err != nil {
		return authprofile.State{}, false, err
	}
	defer unlock()

	cur, rev := s.cache.entry(key, profileID)
	fresh := false
	lost := 0
	for range s.cfg.MaxAttempts {
		now := s.cfg.Now()
		base, _ := authprofile.ClearExpired(cur, now)
		next, ok := fn(base, now)
		data, err := json.Marshal(next)
		if err != nil {
			return authprofile.State{}, false, err
		}
		if !ok || bytes.Equal(data, mustJSON(cur)) {
			if fresh {
				return next, ok, nil
			}
			if cur, rev, err = s.read(ctx, key, profileID); err != nil {
				return authprofile.State{}, false, err
			}
			fresh = true
			continue
		}
		var newRev uint64
		if rev == 0 {
			newRev, err = s.kv.Create(ctx, key, data)
		} else {
			newRev, err = s.kv.Update(ctx, key, data, rev)
		}
		if err == nil {
			s.cache.setState(key, profileID, next, newRev)
			s.cache.publish()
			return next.Clone(), true, nil // next is shared with readers now
		}
		if !isConflict(err) {
			return authprofile.State{}, false, err
		}
		s.conflicts.Add(1)
		if fresh {
			// We lost with a value read from the bucket: another worker is
			// writing the same key right now; step aside for a moment.
			lost++
			if err := casBackoff.Wait(ctx, lost); err != nil {
				return authprofile.State{}, false, err
			}
		}
		if cur, rev, err = s.read(ctx, key, profileID); err != nil {
			return authprofile.State{}, false, err
		}
		fresh = true
	}
	return authprofile.State{}, false, fmt.Errorf("%w (%d attempts)", ErrConflict, s.cfg.MaxAttempts)
}

// read fetches a profile's state from the bucket and records it in the
// cache. A missing or deleted key is the empty state with revision 0 (Create
// writes over a delete marker); an unreadable value is the empty state at
// its revision, so the next write replaces it.
func (s *Store) read(ctx context.Context, key, profileID string) (authprofile.State, uint64, error) {
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return authprofile.State{}, 0, nil
	}
	if err != nil {
		return authprofile.State{}, 0, err
	}
	st, err := decodeState(e.Value())
	if err != nil {
		s.log.Warn().Str("profile", profileID).Uint64("revision", e.Revision()).Int("bytes", len(e.Value())).Err(err).
			Msg("authstore: malformed profile state in bucket; treating it as empty")
	}
	s.cache.setState(key, profileID, st, e.Revision())
	s.cache.publish()
	return st, e.Revision(), nil
}

// lock takes the stripe lock of key, giving up when ctx ends.
func (s *Store) lock(ctx context.Context, key string) (func(), error) {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	ch := s.locks[h.Sum32()%uint32(len(s.locks))]
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// casBackoff is the wait of a writer that lost a compare-and-swap to
// another: a random time in (0, min(100ms, 1ms·2^(n−1))].
var casBackoff = backoff.Policy{Base: time.Millisecond, Max: 100 * time.Millisecond, Jitter: true}

// isConflict reports a failed compare-and-swap: the key changed since the
// revision we wrote against (10071 on R1, 10164 on replicated streams), or
// Create found it existing.
func isConflict(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

func mustJSON(st authprofile.State) []byte {
	data, _ := json.Marshal(st)
	return data
}
