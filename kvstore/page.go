package kvstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// NextRecord reads the lane's first transcript record stored at or after
// stream sequence from (leader read), for readers that page through a
// transcript one record at a time, such as the lane service. It returns the
// record's stream sequence (resume at seq+1) and false when there is none.
// Delete and purge markers are skipped; a record that does not decode is
// an error, with seq saying which one.
func (l *Lanes) NextRecord(ctx context.Context, token string, from uint64) (rec Record, seq uint64, ok bool, err error) {
	filter := l.prefix + token + ".tx.>"
	for from = max(from, 1); ; {
		raw, err := l.stream.GetMsg(ctx, from, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return Record{}, 0, false, nil
		}
		if err != nil {
			return Record{}, 0, false, fmt.Errorf("kvstore: records %s: %w", token, err)
		}
		if len(raw.Data) == 0 || raw.Header.Get("KV-Operation") != "" {
			from = raw.Sequence + 1
			continue
		}
		if err := decode(strings.TrimPrefix(raw.Subject, l.prefix), raw.Sequence, raw.Data, &rec); err != nil {
			return Record{}, raw.Sequence, false, err
		}
		return rec, raw.Sequence, true, nil
	}
}
