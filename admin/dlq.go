package admin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
)

// showFraming is what a dlq.show reply carries besides the data: the
// headers (bounded by the server's max header size) and the fields.
const showFraming = 64 << 10

// deadList returns a page of dead letters, headers only.
func (s *Service) deadList(ctx context.Context, data []byte) (any, error) {
	var q DeadListRequest
	if err := decode(data, &q); err != nil {
		return nil, err
	}
	if err := checkReason(q.Reason); err != nil {
		return nil, badRequest("%v", err)
	}
	n, err := limit(q.Limit)
	if err != nil {
		return nil, err
	}
	letters, err := s.scanDead(ctx, q.Reason, q.After, n+1)
	if err != nil {
		return nil, err
	}
	rep := DeadListReply{Letters: letters}
	if len(letters) > n {
		rep.Letters, rep.More, rep.Next = letters[:n], true, letters[n-1].Seq
	}
	return rep, nil
}

// scanWait bounds one fetch of a listing's messages; a fetch that ends
// with nothing while the consumer still counts some pending asks again
// (the request's context, RequestTimeout, bounds the whole scan).
const scanWait = 5 * time.Second

// scanDead returns up to n dead letters after the stream sequence after,
// of reason (all when empty), without their data: an ephemeral consumer
// delivers headers only, so listing 4 MiB letters moves none of them. The
// consumer's pending count, not a fetch that came back empty, says when
// the letters are all read: a no-wait fetch on a loaded server ends (after
// the client's 1 s) with nothing, which read as the end of the list.
func (s *Service) scanDead(ctx context.Context, reason string, after uint64, n int) ([]DeadLetter, error) {
	info, err := s.cfg.Dead.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("admin: scan dead letters: stream info: %w", err)
	}
	out := []DeadLetter{}
	if info.State.Msgs == 0 || info.State.LastSeq <= after {
		return out, nil
	}
	filter := events.DeadPrefix + ">"
	if reason != "" {
		filter = events.DeadPrefix + reason
	}
	// open reads the letters from start on with a new consumer.
	open := func(start uint64) (jetstream.Consumer, error) {
		c, err := s.cfg.Dead.CreateConsumer(ctx, jetstream.ConsumerConfig{FilterSubject: filter,
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start, HeadersOnly: true,
			AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, Replicas: 1, InactiveThreshold: 30 * time.Second})
		if err != nil {
			return nil, fmt.Errorf("admin: scan dead letters: a consumer of %s from %d: %w", filter, start, err)
		}
		return c, nil
	}
	cons, err := open(after + 1)
	if err != nil {
		return nil, err
	}
	defer func() { s.deleteConsumer(cons) }()
	pending, last := cons.CachedInfo().NumPending, after
	for len(out) < n && pending > 0 {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("admin: scan dead letters: %w", err)
		}
		batch, err := cons.Fetch(int(min(pending, uint64(n-len(out)))), jetstream.FetchMaxWait(scanWait))
		if err != nil {
			return nil, fmt.Errorf("admin: scan dead letters: fetch after %d: %w", last, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			pending, last = md.NumPending, md.Sequence.Stream
			size, _ := strconv.Atoi(m.Headers().Get(nats.MsgSize))
			out = append(out, letterOf(md.Sequence.Stream, m.Subject(), md.Timestamp, m.Headers(), size))
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, fmt.Errorf("admin: scan dead letters: fetch after %d: %w", last, err)
		}
		if got == 0 {
			// Nothing within the client's wait: a loaded server, or the
			// letters were deleted meanwhile. What the server sent after
			// the client stopped waiting is gone from this consumer (no
			// acks), so a new one reads on from the last letter received;
			// its count says whether any are left.
			next, err := open(last + 1)
			if err != nil {
				return nil, err // the deferred delete removes cons
			}
			s.deleteConsumer(cons)
			cons, pending = next, next.CachedInfo().NumPending
		}
	}
	return out, nil
}

// deleteConsumer removes a listing's ephemeral consumer at once (left
// alone it would count against the server's consumer limit for its
// inactive threshold).
func (s *Service) deleteConsumer(c jetstream.Consumer) {
	info := c.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.cfg.JS.DeleteConsumer(ctx, events.DeadStream, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		s.log.Debug().Err(err).Msg("admin: delete listing consumer")
	}
}

// letterOf describes a dead letter from its stored form.
func letterOf(seq uint64, subject string, t time.Time, h nats.Header, size int) DeadLetter {
	d := DeadLetter{Seq: seq, Reason: strings.TrimPrefix(subject, events.DeadPrefix), Time: t.UnixMilli(), Size: size,
		Subject: h.Get(events.HeaderSubject), Error: h.Get(events.HeaderError)}
	d.InboundSeq, _ = strconv.ParseUint(h.Get(events.HeaderSeq), 10, 64)
	if _, key, err := events.LaneOf(d.Subject); err == nil {
		d.Session, d.Fingerprint = key, events.Fingerprint(key)
	}
	return d
}

// deadShow returns one dead letter with its headers and data.
func (s *Service) deadShow(ctx context.Context, data []byte) (any, error) {
	var q DeadShowRequest
	if err := decode(data, &q); err != nil {
		return nil, err
	}
	raw, err := s.getDead(ctx, q.Seq)
	if err != nil {
		return nil, err
	}
	d := letterOf(raw.Sequence, raw.Subject, raw.Time, raw.Header, len(raw.Data))
	d.Headers = raw.Header
	d.Data = raw.Data
	if budget := int(s.nc.MaxPayload()) - showFraming; len(d.Data) > budget {
		d.Data, d.Truncated = d.Data[:max(budget, 0)], true
	}
	return d, nil
}

// getDead reads one dead letter.
func (s *Service) getDead(ctx context.Context, seq uint64) (*jetstream.RawStreamMsg, error) {
	if seq == 0 {
		return nil, badRequest("seq is required: the dead letter's sequence (dlq list shows it)")
	}
	raw, err := s.cfg.Dead.GetMsg(ctx, seq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, notFound("no dead letter %d", seq)
	case err != nil:
		return nil, err
	case !strings.HasPrefix(raw.Subject, events.DeadPrefix):
		return nil, notFound("no dead letter %d", seq)
	}
	return raw, nil
}

// selectDead returns the sequences a replay or purge request names (at most
// max; more reports that there were more).
func (s *Service) selectDead(ctx context.Context, q DeadSelect, most int) (seqs []uint64, more bool, err error) {
	if err := checkSelect(q); err != nil {
		return nil, false, err
	}
	if len(q.Seqs) > 0 {
		if len(q.Seqs) > most {
			return nil, false, badRequest("%d dead letters in one request; at most %d", len(q.Seqs), most)
		}
		return q.Seqs, false, nil
	}
	letters, err := s.scanDead(ctx, q.Reason, 0, most+1)
	if err != nil {
		return nil, false, err
	}
	for _, l := range letters[:min(len(letters), most)] {
		seqs = append(seqs, l.Seq)
	}
	return seqs, len(letters) > most, nil
}

// checkSelect reports what is wrong with a selection: it names exactly
// one of seqs, a reason or all, and a valid reason.
func checkSelect(q DeadSelect) error {
	chosen := 0
	if len(q.Seqs) > 0 {
		chosen++
	}
	if q.Reason != "" {
		chosen++
	}
	if q.All {
		chosen++
	}
	if chosen != 1 {
		return badRequest("name the dead letters: seqs, a reason, or all (exactly one)")
	}
	if err := checkReason(q.Reason); err != nil {
		return badRequest("%v", err)
	}
	return nil
}

// deadReplay publishes dead letters again on their lanes. Each replay's
// message id is derived from the dead letter (Lanefleet-Msg-Id
// dlq-replay-<seq>), so a replay repeated within the dedupe window (a
// retried request, two operators) runs once: the lane de-duplicates it. It
// is no Nats-Msg-Id, which the stream de-duplicates stream-wide: a sender
// could store that guessable id first and make the replay vanish. The dead
// letter is deleted once the inbound stream has the message, unless Keep.
func (s *Service) deadReplay(ctx context.Context, data []byte) (any, error) {
	var q DeadSelect
	if err := decode(data, &q); err != nil {
		return nil, err
	}
	seqs, more, err := s.selectDead(ctx, q, ReplayMax)
	if err != nil {
		return nil, err
	}
	rep := DeadReplayReply{Replayed: []Replayed{}, More: more}
	for _, seq := range seqs {
		r, why, err := s.replayOne(ctx, seq, q.Keep)
		switch {
		case err != nil:
			return nil, err
		case why != "":
			rep.Skipped = append(rep.Skipped, Skipped{Seq: seq, Why: why})
		default:
			rep.Replayed = append(rep.Replayed, r)
		}
	}
	return rep, nil
}

func (s *Service) replayOne(ctx context.Context, seq uint64, keep bool) (Replayed, string, error) {
	raw, err := s.getDead(ctx, seq)
	var se *sessionsvc.Error
	if errors.As(err, &se) && se.Code == CodeNotFound {
		return Replayed{}, "no such dead letter", nil
	}
	if err != nil {
		return Replayed{}, "", err
	}
	subj := raw.Header.Get(events.HeaderSubject)
	_, key, err := events.LaneOf(subj)
	if err != nil {
		return Replayed{}, fmt.Sprintf("its subject %q is no lane's: nothing to replay it to", clip(subj)), nil
	}
	m := nats.NewMsg(subj)
	m.Data = raw.Data
	for k, v := range raw.Header {
		switch k {
		case events.HeaderError, events.HeaderSubject, events.HeaderSeq:
		default:
			m.Header[k] = v
		}
	}
	m.Header.Set(events.HeaderLaneMsgID, "dlq-replay-"+strconv.FormatUint(seq, 10))
	ack, err := s.cfg.JS.PublishMsg(ctx, m)
	if err != nil {
		return Replayed{}, "", fmt.Errorf("admin: replay dead letter %d to %s: %w", seq, subj, err)
	}
	if !keep {
		if err := s.cfg.Dead.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			s.log.Warn().Err(err).Uint64("seq", seq).Msg("admin: replayed dead letter not deleted")
		}
	}
	run := strconv.FormatUint(ack.Sequence, 10)
	s.log.Info().Uint64("dead_letter", seq).Str("session", events.Fingerprint(key)).Str("run_id", run).
		Msg("dead letter replayed by an operator")
	return Replayed{Seq: seq, Session: key, Run: run}, "", nil
}

// deadPurge deletes dead letters.
func (s *Service) deadPurge(ctx context.Context, data []byte) (any, error) {
	var q DeadSelect
	if err := decode(data, &q); err != nil {
		return nil, err
	}
	if q.Keep {
		return nil, badRequest("keep applies to a replay, not a purge")
	}
	if err := checkSelect(q); err != nil {
		return nil, err
	}
	var rep DeadPurgeReply
	if len(q.Seqs) > 0 {
		if len(q.Seqs) > LimitMax {
			return nil, badRequest("%d dead letters in one request; at most %d", len(q.Seqs), LimitMax)
		}
		for _, seq := range q.Seqs {
			err := s.cfg.Dead.DeleteMsg(ctx, seq)
			switch {
			case errors.Is(err, jetstream.ErrMsgNotFound):
			case err != nil:
				return nil, err
			default:
				rep.Purged++
			}
		}
		return rep, nil
	}
	filter := events.DeadPrefix + ">"
	if q.Reason != "" {
		filter = events.DeadPrefix + q.Reason
	}
	before, err := s.cfg.Dead.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, err
	}
	for _, n := range before.State.Subjects {
		rep.Purged += n
	}
	opts := []jetstream.StreamPurgeOpt{}
	if q.Reason != "" {
		opts = append(opts, jetstream.WithPurgeSubject(filter))
	}
	if err := s.cfg.Dead.Purge(ctx, opts...); err != nil {
		return nil, err
	}
	s.log.Info().Str("reason", q.Reason).Uint64("purged", rep.Purged).Msg("dead letters purged by an operator")
	return rep, nil
}
