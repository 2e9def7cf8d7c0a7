package kvstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A run's step journal lives next to its lane's records:
//
//	T.j.<n>   step n (from 1) of the lane's current turn, headed with the
//	          inbound sequence of the message that started it
//
// written under the lease's fence like a turn record, so a stale owner can
// never add to it. A lane runs one turn at a time, so one journal per lane
// is enough: the bucket keeps one message per key, and a turn's step n
// replaces the step n an earlier turn left. Nothing removes a committed
// turn's steps (that would be one more synchronous write per turn): a read
// takes only the steps headed with its own sequence, so leftovers never
// join a later turn's journal, and every step expires after StepTTL.

// StepTTL is how long a journal step is kept; a turn retried later than
// that (its worker gone for a day) starts over.
const StepTTL = 24 * time.Hour

// MaxStepReads bounds the steps one read returns.
const MaxStepReads = 16384

// headerStepOf names the inbound sequence of the turn a step belongs to.
const headerStepOf = "Lanefleet-Step-Of"

func stepKey(token string, n int) string { return token + ".j." + strconv.Itoa(n) }

// Steps reads the journal of the turn started by inbound message seq: its
// steps from 1 up to the first missing one (leader reads, one request per
// step the lane has).
func (l *Lanes) Steps(ctx context.Context, token string, seq uint64) ([][]byte, error) {
	filter := l.prefix + token + ".j.*"
	want := strconv.FormatUint(seq, 10)
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
		if len(raw.Data) == 0 || raw.Header.Get("KV-Operation") != "" || raw.Header.Get(headerStepOf) != want {
			continue // a delete marker, or an earlier turn's step
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
	key := stepKey(s.token, n)
	msg := &nats.Msg{Subject: s.lanes.prefix + key, Data: data, Header: nats.Header{headerStepOf: []string{strconv.FormatUint(seq, 10)}}}
	return s.fenced(ctx, "write "+key, func(rev uint64) error {
		_, err := s.lanes.js.PublishMsg(ctx, msg,
			jetstream.WithExpectLastSequenceForSubject(rev, s.lanes.prefix+leaseKey(s.token)),
			jetstream.WithMsgTTL(StepTTL))
		return err
	})
}
