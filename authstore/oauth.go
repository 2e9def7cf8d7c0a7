package authstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
)

// oauthPrefix keys an OAuth profile's tokens (anthropic.OAuthStore).
const oauthPrefix = "oauth."

// oauthKey is the bucket key of a profile's OAuth tokens.
func oauthKey(id string) (string, error) {
	tok, err := events.KeyToken(id)
	if err != nil {
		return "", fmt.Errorf("authstore: profile id %q: %w", id, err)
	}
	return oauthPrefix + tok, nil
}

// LoadOAuth returns the OAuth tokens record of a profile and its revision
// (nil and 0 when there is none), read from the bucket, not the watcher's
// copy: the revision is what SwapOAuth compares. The record's bytes are
// the caller's (anthropic.OAuth) and hold secrets: nothing here logs them.
func (s *Store) LoadOAuth(ctx context.Context, profile string) ([]byte, uint64, error) {
	key, err := oauthKey(profile)
	if err != nil {
		return nil, 0, err
	}
	e, err := s.kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, 0, nil
	case err != nil:
		return nil, 0, fmt.Errorf("authstore: load OAuth tokens of %q: %w", profile, err)
	}
	return e.Value(), e.Revision(), nil
}

// SwapOAuth writes a profile's OAuth tokens record if its revision is
// still rev (0: if there is none), with the bucket's compare-and-swap; ok
// is false when another write came first. It works on a Store that is
// closing: a refresh's new tokens must be stored before its connection
// goes.
func (s *Store) SwapOAuth(ctx context.Context, profile string, data []byte, rev uint64) (uint64, bool, error) {
	key, err := oauthKey(profile)
	if err != nil {
		return 0, false, err
	}
	var n uint64
	if rev == 0 {
		n, err = s.kv.Create(ctx, key, data)
	} else {
		n, err = s.kv.Update(ctx, key, data, rev)
	}
	switch {
	case err == nil:
		return n, true, nil
	case isConflict(err):
		s.conflicts.Add(1)
		return 0, false, nil
	}
	return 0, false, fmt.Errorf("authstore: store OAuth tokens of %q: %w", profile, err)
}
