package kvstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/internal/directget"
)

// LeaseRead is one lane's lease as Leases read it: its state (Lease), or
// Err, a *CorruptError, when its value does not read.
type LeaseRead struct {
	State LeaseState
	Err   error
}

// Leases returns the leases of tokens' lanes (in tokens' order) as Lease
// reads each, in one multi-last Direct Get when the bucket answers Direct
// Gets (DirectGet: at R1), else one read each: a listing's page of
// running sessions asks the store once, not once a session.
func (l *Lanes) Leases(ctx context.Context, tokens []string) ([]LeaseRead, error) {
	out := make([]LeaseRead, len(tokens))
	if !l.stream.CachedInfo().Config.AllowDirect {
		for i, tok := range tokens {
			st, err := l.Lease(ctx, tok)
			if err != nil && !errors.Is(err, ErrCorrupt) {
				return nil, err
			}
			out[i] = LeaseRead{State: st, Err: err}
		}
		return out, nil
	}
	subjects := make([]string, len(tokens))
	for i, tok := range tokens {
		subjects[i] = l.prefix + leaseKey(tok)
	}
	err := lastOfEach(ctx, l.js, l.stream.CachedInfo().Config.Name, subjects, func(m directget.Msg, at []int) {
		st, err := l.leaseState(m.Subject, m.Seq, m.Time, m.Header, m.Data)
		for _, i := range at {
			out[i] = LeaseRead{State: st, Err: err}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("kvstore: leases: %w", err)
	}
	return out, nil
}

// lastOfEach reads the last message of each of subjects of stream in one
// multi-last Direct Get (directget.Last) and hands each message found on,
// once, with the indexes of subjects that name its subject (a subject
// asked twice has two).
func lastOfEach(ctx context.Context, js jetstream.JetStream, stream string, subjects []string, found func(m directget.Msg, at []int)) error {
	at := make(map[string][]int, len(subjects))
	for i, subj := range subjects {
		at[subj] = append(at[subj], i)
	}
	msgs, err := directget.Last(ctx, js.Conn(), directget.Subject(js, stream), directget.Request{MultiLast: subjects})
	if err != nil {
		return err
	}
	for _, m := range msgs { // each subject once (Last)
		if is, ok := at[m.Subject]; ok {
			found(m, is)
		}
	}
	return nil
}
