package kvstore

import (
	"context"
	"errors"
	"fmt"

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
	at := make(map[string][]int, len(tokens))
	for i, tok := range tokens {
		subjects[i] = l.prefix + leaseKey(tok)
		at[subjects[i]] = append(at[subjects[i]], i)
	}
	msgs, err := directget.Last(ctx, l.js.Conn(), directget.Subject(l.js, l.stream.CachedInfo().Config.Name), directget.Request{MultiLast: subjects})
	if err != nil {
		return nil, fmt.Errorf("kvstore: leases: %w", err)
	}
	for _, m := range msgs { // each subject once (Last)
		st, err := l.leaseState(m.Subject, m.Seq, m.Time, m.Header, m.Data)
		for _, i := range at[m.Subject] {
			out[i] = LeaseRead{State: st, Err: err}
		}
	}
	return out, nil
}
