package kvstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A run's step journal lives next to its lane's records:
//
//	T.j.<seq>.<n>   step n (from 1) of the turn started by inbound message seq
//
// written under the lease's fence like a turn record, so a stale owner can
// never add to it, and removed once the turn's record is written. Steps
// expire after StepTTL should a turn never commit (its message was
// dead-lettered).

// StepTTL is how long a journal step outlives a turn that never commits.
const StepTTL = 24 * time.Hour

// MaxStepReads bounds the steps one read returns.
const MaxStepReads = 16384

func stepKey(token string, seq uint64, n int) string {
	return fmt.Sprintf("%s.j.%d.%d", token, seq, n)
}

func stepFilter(prefix, token string, seq uint64) string {
	return fmt.Sprintf("%s%s.j.%d.>", prefix, token, seq)
}

// Steps reads the journal of the turn started by inbound message seq: its
// steps from 1 up to the first missing one (leader reads, one request per
// step).
func (l *Lanes) Steps(ctx context.Context, token string, seq uint64) ([][]byte, error) {
	filter := stepFilter(l.prefix, token, seq)
	byN := map[int][]byte{}
	for from, reads := uint64(1), 0; reads < MaxStepReads; reads++ {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		raw, err := l.stream.GetMsg(rctx, from, jetstream.WithGetMsgSubject(filter))
		cancel()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("kvstore: steps %s/%d: %w", token, seq, err)
		}
		from = raw.Sequence + 1
		if len(raw.Data) == 0 || raw.Header.Get("KV-Operation") != "" {
			continue // a delete or purge marker
		}
		i := strings.LastIndexByte(raw.Subject, '.')
		n, err := strconv.Atoi(raw.Subject[i+1:])
		if err != nil || n < 1 || n > MaxStepReads {
			continue
		}
		byN[n] = raw.Data
	}
	out := make([][]byte, 0, len(byN))
	for n := 1; byN[n] != nil; n++ {
		out = append(out, byN[n])
	}
	return out, nil
}

// PutStep writes step n of the turn started by inbound message seq under
// the fence. Writing step n again replaces it.
func (s *Lease) PutStep(ctx context.Context, seq uint64, n int, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := stepKey(s.token, seq, n)
	return s.fenced(ctx, "write "+key, func(rev uint64) error {
		_, err := s.lanes.js.Publish(ctx, s.lanes.prefix+key, data,
			jetstream.WithExpectLastSequenceForSubject(rev, s.lanes.prefix+leaseKey(s.token)),
			jetstream.WithMsgTTL(StepTTL))
		return err
	})
}

// DropSteps removes the journal of the turn started by inbound message seq
// (once its record is written, nothing reads it again).
func (l *Lanes) DropSteps(ctx context.Context, token string, seq uint64) error {
	if err := l.stream.Purge(ctx, jetstream.WithPurgeSubject(stepFilter(l.prefix, token, seq))); err != nil {
		return fmt.Errorf("kvstore: drop steps %s/%d: %w", token, seq, err)
	}
	return nil
}
