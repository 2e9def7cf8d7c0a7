package kvstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// NewestLimits bound one NewestRecords read: what it loads from the
// store, whatever its caller does with it.
type NewestLimits struct {
	// Records is the most records read (at least 1 is).
	Records int
	// Bytes is the most encoded record bytes read: no record is read once
	// they are reached, so the record that crosses it is the last (at
	// least 1 is read).
	Bytes int
}

// NewestRead is what one NewestRecords read did.
type NewestRead struct {
	Records int // records read, corrupt ones included
	Bytes   int // their encoded bytes
	// More says the transcript has older records the read did not hand
	// over (a limit or the caller stopped it); Next is the before of a
	// read that goes on with them.
	More bool
	Next uint64
}

// NewestRecords hands a lane's transcript records to fn newest first (by
// the inbound sequence their keys name, the order turns commit in),
// starting below turn before (an inbound sequence, exclusive; 0 = from
// the newest), until fn returns false, the transcript's start (a reset
// record, which fn gets, or the lane's first record), or a limit of lim.
// It reads only the records it hands over, one leader read each, after
// one request that lists the lane's record keys (about 40 bytes a
// record, none of their data) and, below a turn, one read of the newest
// record (where the transcript starts now), so what it loads is bounded
// by lim however long the transcript is. Records that do not decode are
// counted and skipped, with a *CorruptError each (joined) next to the
// result; a record deleted while it reads is skipped.
func (l *Lanes) NewestRecords(ctx context.Context, token string, before uint64, lim NewestLimits, fn func(Record) bool) (NewestRead, error) {
	keys, err := l.recordKeys(ctx, token, before)
	if err != nil {
		return NewestRead{}, err
	}
	var (
		read    NewestRead
		corrupt []error
		start   uint64 // stream sequence of the reset the transcript starts at
	)
	if before > 0 && len(keys) > 0 {
		// A read that goes on below a turn learns where the transcript
		// starts from its newest record: a reset since the read it goes
		// on from hides what lies below it.
		cur, err := l.Cursor(ctx, token)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			return NewestRead{}, err
		}
		start = cur.Start
	}
	for i, seq := range keys {
		if read.Records >= max(lim.Records, 1) || read.Records > 0 && read.Bytes >= lim.Bytes {
			read.More, read.Next = true, seq+1
			break
		}
		rctx, cancel := context.WithTimeout(ctx, readTimeout)
		raw, err := l.stream.GetLastMsgForSubject(rctx, l.prefix+recordKey(token, seq))
		cancel()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // deleted since the listing
		}
		if err != nil {
			return NewestRead{}, fmt.Errorf("kvstore: record %s/%d: %w", token, seq, err)
		}
		if len(raw.Data) == 0 || raw.Header.Get("KV-Operation") != "" {
			continue // a delete or purge marker
		}
		if start > 0 && raw.Sequence < start {
			break // written before the reset the transcript starts at
		}
		read.Records++
		read.Bytes += len(raw.Data)
		var r Record
		if err := decode(strings.TrimPrefix(raw.Subject, l.prefix), raw.Sequence, raw.Data, &r); err != nil {
			corrupt = append(corrupt, err)
			continue
		}
		start = max(start, r.Start)
		if r.Reset {
			fn(r)
			break // the transcript starts here
		}
		if !fn(r) {
			if i+1 < len(keys) {
				read.More, read.Next = true, seq
			}
			break
		}
	}
	return read, errors.Join(corrupt...)
}

// recordKeys lists the inbound sequences a lane's transcript record keys
// name below before (0 = all), newest first, from the stream's subject
// counts (no record data).
func (l *Lanes) recordKeys(ctx context.Context, token string, before uint64) ([]uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	info, err := l.stream.Info(ctx, jetstream.WithSubjectFilter(l.prefix+token+".tx.>"))
	if err != nil {
		return nil, fmt.Errorf("kvstore: record keys of %s: %w", token, err)
	}
	keys := make([]uint64, 0, len(info.State.Subjects))
	for subject := range info.State.Subjects {
		if seq, ok := recordSeq(subject); ok && (before == 0 || seq < before) {
			keys = append(keys, seq)
		}
	}
	slices.Sort(keys)
	slices.Reverse(keys)
	return keys, nil
}
