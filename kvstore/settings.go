package kvstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// T.settings holds a lane's stored queue and run settings, as bytes the
// lanes package encodes (events.EncodeSettings). The owner writes them
// under the lease's fence when it processes a settings message, so they
// change exactly between two of the lane's messages; every owner reads
// them when it takes the lane.

func settingsKey(token string) string { return token + ".settings" }

// Settings reads a lane's stored settings (leader read); nil when none are
// stored.
func (l *Lanes) Settings(ctx context.Context, token string) ([]byte, error) {
	e, err := l.kv.Get(ctx, settingsKey(token))
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kvstore: settings %s: %w", token, err)
	}
	return e.Value(), nil
}

// PutSettings stores the lane's settings under the fence. ErrLeaseLost means
// the lease moved on and nothing was written.
func (s *Lease) PutSettings(ctx context.Context, data []byte) error {
	_, err := s.put(ctx, settingsKey(s.token), data)
	return err
}
