package kvstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"
)

// What a session leaves in the bucket, and how each part goes away:
//
//	T.lease     per-key TTL (LeaseTTL); a release purges it with a marker
//	            that lives MarkerTTL: never older than a lease TTL
//	T.tx.<seq>  one record per turn, kept until the session expires
//	            (Lease.Forget, called by the worker's retention pass)
//	T.settings  the same
//
// and in the journal stream (StepsStream) agent.steps.T.>: purged when its
// turn commits, or with the session (Lease.Forget), else after StepTTL.
//
// The retention pass walks the bucket's stream in sequence (= time) order
// from a position stored under the key retentionKey, which no lane key can
// be (every lane key has a dot), and keeps the lanes it moved past after
// their forget kept failing under retryKey.

// retentionKey holds the retention pass's scan position.
const retentionKey = "retention"

// Stored is one message of the bucket's stream as the retention pass reads
// it.
type Stored struct {
	Seq  uint64
	Time time.Time
	// Token is the lane the key belongs to; empty for keys of no lane.
	Token string
	// Data reports a transcript record or settings (session data the
	// session's expiry removes), false for leases, delete and purge
	// markers and the server's TTL markers, which expire on their own.
	Data bool
}

// ScanBatch reads up to n messages of the bucket's stream from seq on, in
// stream order, their headers only (an ephemeral consumer on the leader,
// deleted after; a message's data is never read). It returns none past the
// end of the stream. One request per message, as the pass read the bucket
// before, was slower than a busy worker writes (about five messages a turn)
// once a request took a millisecond: the pass fell behind for good, and the
// bucket, with the subject index the server keeps of it, grew as without a
// TTL.
func (l *Lanes) ScanBatch(ctx context.Context, seq uint64, n int) ([]Stored, error) {
	cons, err := l.stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       max(seq, 1),
		FilterSubject:     l.prefix + ">",
		AckPolicy:         jetstream.AckNonePolicy,
		HeadersOnly:       true,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: scanConsumerIdle, // in case the delete below is lost
	})
	if err != nil {
		return nil, fmt.Errorf("kvstore: scan from %d: %w", seq, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = l.stream.DeleteConsumer(dctx, cons.CachedInfo().Name)
	}()
	// The consumer counted the messages from seq on when it was made.
	// A no-wait request brings them (up to n) and ends at the stream's
	// end: a message removed since it was counted (a purge, a key
	// written again, a TTL) leaves a short batch, where a request that
	// waited for the count waited out scanWait for it. Only when the
	// no-wait request brings none while the consumer still counts some (a
	// consumer on a replica behind the leader) is the count waited for,
	// so the pass does not take that for the end of the bucket.
	pending := cons.CachedInfo().NumPending
	if pending == 0 {
		return nil, nil
	}
	if l.testHookScan != nil {
		l.testHookScan()
	}
	want := int(min(uint64(n), pending))
	out, err := l.scanFetch(cons, seq, want, true)
	for attempt := 0; errors.Is(err, nats.ErrNoResponders) && attempt < scanNotReady; attempt++ {
		// On a replicated bucket the consumer may not serve yet on its
		// node, moments after it was made: it delivered nothing.
		if perr := pause(ctx, attempt); perr != nil {
			return nil, fmt.Errorf("kvstore: scan from %d: %w", seq, perr)
		}
		out, err = l.scanFetch(cons, seq, want, true)
	}
	if err != nil || len(out) > 0 {
		return out, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("kvstore: scan from %d: %w", seq, err)
	}
	if info.NumPending == 0 {
		return nil, nil // every message it counted went
	}
	return l.scanFetch(cons, seq, want, false)
}

// scanFetch fetches up to n messages of a scan's consumer (ScanBatch), by
// a no-wait request or one that waits up to scanWait for them.
func (l *Lanes) scanFetch(cons jetstream.Consumer, seq uint64, n int, noWait bool) ([]Stored, error) {
	var (
		batch jetstream.MessageBatch
		err   error
	)
	if noWait {
		batch, err = cons.FetchNoWait(n)
	} else {
		batch, err = cons.Fetch(n, jetstream.FetchMaxWait(scanWait))
	}
	if err != nil {
		return nil, fmt.Errorf("kvstore: scan from %d: %w", seq, err)
	}
	var out []Stored
	for m := range batch.Messages() {
		meta, err := m.Metadata()
		if err != nil {
			return out, fmt.Errorf("kvstore: scan from %d: %w", seq, err)
		}
		st := Stored{Seq: meta.Sequence.Stream, Time: meta.Timestamp}
		key := strings.TrimPrefix(m.Subject(), l.prefix)
		if tok, rest, lane := strings.Cut(key, "."); lane {
			h := m.Headers()
			st.Token = tok
			marker := h.Get(nats.MsgSize) == "0" || h.Get("KV-Operation") != "" || h.Get(jetstream.MarkerReasonHeader) != ""
			st.Data = !marker && (rest == "settings" || strings.HasPrefix(rest, "tx."))
		}
		out = append(out, st)
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, nats.ErrTimeout) {
		return out, fmt.Errorf("kvstore: scan from %d: %w", seq, err)
	}
	return out, nil
}

// scanConsumerIdle is how long the server keeps a scan's consumer whose
// delete did not reach it; scanWait how long a batch waits for the
// messages its consumer counted when a no-wait fetch brought none.
const (
	scanConsumerIdle = time.Minute
	scanWait         = 5 * time.Second
	// scanNotReady bounds the fetches of a scan whose new consumer does
	// not answer yet (no responders: a replicated bucket's consumer
	// moments after it was made), about a second in all (pause).
	scanNotReady = 24
)

// LaneData is what a lane keeps in the bucket, as the retention pass sees it.
type LaneData struct {
	Keys      []string  // its transcript records and settings (a removed one's marker may be among them: removing it again is harmless)
	LastWrite time.Time // when the newest of them was written; zero when there is none
	Cursor    uint64    // the inbound sequence of its newest record (its cursor)
	// Seen is the stream sequence of the newest record read (0 when
	// none): a record or settings written to the lane since comes after
	// it, whichever order the server lists subjects and reads its last
	// sequence in (the bucket keeps one message a key). Lease.Untouched
	// checks nothing but the lease came after it.
	Seen uint64
}

// Data reads what the lane keeps (leader reads). Its keys come from the
// stream's subject index (a stream info request filtered by the lane's
// keys: an index lookup, where a wildcard message lookup would read message
// blocks), then the newest record, and the settings when the index has
// them, are read by key: two requests for a lane without settings.
func (l *Lanes) Data(ctx context.Context, token string) (LaneData, error) {
	var d LaneData
	info, err := l.stream.Info(ctx, jetstream.WithSubjectFilter(l.prefix+token+".>"))
	if err != nil {
		return d, fmt.Errorf("kvstore: keys of %s: %w", token, err)
	}
	type record struct {
		key string
		seq uint64
	}
	var records []record
	settings := false
	for subj := range info.State.Subjects {
		key := strings.TrimPrefix(subj, l.prefix)
		switch rest := strings.TrimPrefix(key, token+"."); {
		case rest == "settings":
			d.Keys = append(d.Keys, key)
			settings = true
		case strings.HasPrefix(rest, "tx."):
			if seq, ok := recordSeq(subj); ok {
				records = append(records, record{key, seq})
				d.Keys = append(d.Keys, key)
			}
		}
	}
	// The newest record holding a value is the cursor and the last write
	// (a key already removed keeps only its marker for a while).
	slices.SortFunc(records, func(a, b record) int { return cmp.Compare(b.seq, a.seq) })
	for _, r := range records {
		e, err := l.kv.Get(ctx, r.key)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			continue
		}
		if err != nil {
			return d, fmt.Errorf("kvstore: %s: %w", r.key, err)
		}
		d.LastWrite, d.Cursor, d.Seen = e.Created(), r.seq, e.Revision()
		break
	}
	if !settings {
		return d, nil
	}
	e, err := l.kv.Get(ctx, settingsKey(token))
	switch {
	case err == nil:
		if e.Created().After(d.LastWrite) {
			d.LastWrite = e.Created()
		}
	case !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted):
		return d, fmt.Errorf("kvstore: settings of %s: %w", token, err)
	}
	return d, nil
}

// RetentionPos returns the retention pass's scan position and the key's
// revision (0, 0 when none is stored).
func (l *Lanes) RetentionPos(ctx context.Context) (pos, rev uint64, err error) {
	e, err := l.kv.Get(ctx, retentionKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("kvstore: retention position: %w", err)
	}
	if err := decode(e.Key(), e.Revision(), e.Value(), &pos); err != nil {
		return 0, e.Revision(), err // start over: the pass is idempotent
	}
	return pos, e.Revision(), nil
}

// ErrPosMoved means another worker stored a newer retention position (or
// retry list).
var ErrPosMoved = errors.New("kvstore: the retention position moved")

// retryKey holds the retention pass's retry list (RetentionRetries); like
// retentionKey, no lane key can be it.
const retryKey = "retention-retry"

// Retry is a lane the retention pass moved past after its forget kept
// failing (retention.Skip): the pass tries it again at Next.
type Retry struct {
	Token string `msgpack:"t"`
	Tries int    `msgpack:"n"`  // its failed forgets so far
	Next  int64  `msgpack:"at"` // when the pass tries it again (Unix ms)
}

// RetentionRetries returns the retention pass's retry list and the key's
// revision (nil, 0 when none is stored). A list that does not decode
// (ErrCorrupt) comes with its revision, for the pass to write anew.
func (l *Lanes) RetentionRetries(ctx context.Context) ([]Retry, uint64, error) {
	e, err := l.kv.Get(ctx, retryKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("kvstore: retention retries: %w", err)
	}
	var rs []Retry
	if err := decode(e.Key(), e.Revision(), e.Value(), &rs); err != nil {
		return nil, e.Revision(), err
	}
	return rs, e.Revision(), nil
}

// SetRetentionRetries stores the retry list if the key is still at
// revision rev (0: not stored yet); ErrPosMoved if another worker changed
// it first.
func (l *Lanes) SetRetentionRetries(ctx context.Context, rs []Retry, rev uint64) error {
	return l.putRetention(ctx, retryKey, "retries", rs, rev)
}

// SetRetentionPos stores the scan position if the key is still at revision
// rev (0: not stored yet); ErrPosMoved if another worker moved it first.
func (l *Lanes) SetRetentionPos(ctx context.Context, pos, rev uint64) error {
	return l.putRetention(ctx, retentionKey, "position", pos, rev)
}

// putRetention stores v under key if the key is still at revision rev (0:
// not stored yet); ErrPosMoved if another worker changed it first.
func (l *Lanes) putRetention(ctx context.Context, key, what string, v any, rev uint64) error {
	data, err := msgpack.Marshal(v)
	if err != nil {
		return err
	}
	if rev == 0 {
		_, err = l.kv.Create(ctx, key, data)
	} else {
		_, err = l.kv.Update(ctx, key, data, rev)
	}
	if isWrongLastSeq(err) {
		return ErrPosMoved
	}
	if err != nil {
		return fmt.Errorf("kvstore: store retention %s: %w", what, err)
	}
	return nil
}

// Untouched reports whether nothing was written to the lane between
// since (the LaneData.Seen of a Data read before this lease was taken)
// and the lease: the lane's first message after since is the lease's own
// acquisition. Then that read is what the lane keeps under the lease (no
// write can land while it is held), and one read by sequence from near the
// stream's end replaces a second Data. False, not an error, when anything
// came first: read the lane again. What it cannot see is a purge between
// since and the lease (another forget of the lane, which leaves no
// marker; the lease key keeps one message, so the earlier holder's
// release is replaced by this lease): the records Data read are gone
// then, and Forget, which counts what its purges remove, says so (0).
// No message or write is lost by it: a message or a turn in between is
// seen.
func (s *Lease) Untouched(ctx context.Context, since uint64) (bool, error) {
	s.mu.RLock()
	rev := s.rev
	s.mu.RUnlock()
	if since == 0 || since >= rev {
		return false, nil
	}
	m, err := s.lanes.stream.GetMsg(ctx, since+1, jetstream.WithGetMsgSubject(s.lanes.prefix+s.token+".>"))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil // a follower behind the lease's write
	}
	if err != nil {
		return false, fmt.Errorf("kvstore: writes to %s since %d: %w", s.token, since, err)
	}
	return m.Sequence == rev, nil
}

// Forget removes the lane's transcript records and stored settings (keys,
// from Data: it checks them) and its step journals, and reports how many
// keys it removed, as the purges count them: 0 when another forget removed
// them after Data read them (which Untouched cannot see). It takes a fixed number of requests however
// long the session ran: a renewal of the lease, fenced (ErrLeaseLost means
// a newer owner took the lane, and nothing is removed), then, sent at
// once, a purge of the lane's records and one of its settings (each only
// when keys has some), bounded to what the stream stored before that
// renewal, and one of its journals. (A single purge of the lane's every
// key would reach its lease too, whose newest message is the renewal in
// the stream's last block: the server would walk every block from the
// lane's first record to the end of the stream.) What a later owner
// writes comes after the renewal, so no purge reaches it; and no other
// worker can take the lane until the renewed lease has run out
// (LeaseTTL), so the purges are sent only while less than a third of it
// has passed. (A purge marker per key, fenced, cost a publish per turn of
// the session and a marker for the server to expire after MarkerTTL: a
// retention pass made as many writes as the turns it forgot, and the
// fleet's turns slowed while it ran.) A purge leaves no marker: a removed
// key reads as never written.
func (s *Lease) Forget(ctx context.Context, keys []string) (int, error) {
	l := s.lanes
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, key := range keys {
		if !strings.HasPrefix(key, s.token+".") || key == leaseKey(s.token) {
			return 0, fmt.Errorf("kvstore: forget %s: %q is not one of its records", s.token, key)
		}
	}
	start := time.Now()
	err := s.fenced(ctx, "forget", func(rev uint64) error {
		ack, err := l.js.Publish(ctx, l.prefix+leaseKey(s.token), s.value,
			jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(l.cfg.LeaseTTL))
		if err == nil {
			s.rev = ack.Sequence
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	budget := l.cfg.LeaseTTL/3 - time.Since(start)
	if budget <= 0 {
		return 0, fmt.Errorf("kvstore: forget %s: the lease renewal took %v, a third of the lease TTL: nothing removed", s.token, time.Since(start).Round(time.Millisecond))
	}
	pctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	// Only what keys has: the holder's lease keeps other owners from
	// writing a kind the lane did not have when Data read it.
	var filters []string
	if slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, s.token+".tx.") }) {
		filters = append(filters, l.prefix+s.token+".tx.>")
	}
	if slices.Contains(keys, settingsKey(s.token)) {
		filters = append(filters, l.prefix+settingsKey(s.token))
	}
	errs := make([]error, len(filters)+1)
	purged := make([]uint64, len(filters))
	var wg sync.WaitGroup
	for i, filter := range filters {
		wg.Go(func() {
			var err error
			if purged[i], err = l.purge(pctx, filter, s.rev); err != nil {
				errs[i] = fmt.Errorf("kvstore: forget %s: purge %s: %w", s.token, strings.TrimPrefix(filter, l.prefix), err)
			}
		})
	}
	wg.Go(func() { errs[len(filters)] = l.dropLane(ctx, s.token) })
	wg.Wait()
	if err := errors.Join(errs[:len(filters)]...); err != nil {
		return 0, err
	}
	var n int
	for _, p := range purged {
		n += int(p)
	}
	return n, errs[len(filters)]
}

// purge removes the bucket's messages of filter below stream sequence
// before, as Stream.Purge does, and returns how many it removed (which
// the client library's Purge drops): a forget counts what it removed, not
// what a read before its lease found, which another forget may have
// removed since (Untouched cannot see a purge).
func (l *Lanes) purge(ctx context.Context, filter string, before uint64) (uint64, error) {
	body, err := json.Marshal(jetstream.StreamPurgeRequest{Subject: filter, Sequence: before})
	if err != nil {
		return 0, err
	}
	api := l.js.Options().APIPrefix
	if api == "" {
		api = jetstream.DefaultAPIPrefix
	}
	msg, err := l.js.Conn().RequestWithContext(ctx, api+"STREAM.PURGE."+l.stream.CachedInfo().Config.Name, body)
	if err != nil {
		return 0, err
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error,omitempty"`
		Success bool                `json:"success"`
		Purged  uint64              `json:"purged"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return 0, fmt.Errorf("a purge reply that does not decode: %w", err)
	}
	if resp.Error != nil {
		return 0, resp.Error
	}
	if !resp.Success {
		return 0, errors.New("the purge did not succeed")
	}
	return resp.Purged, nil
}

// retentionToken is the lane-like token whose lease is the retention
// pass's: the worker holding it runs the fleet's pass, the others do not.
// "=" starts an encoded session token (events.KeyToken), and "retention"
// is no base64url encoding (nine characters leave one over), so no session
// has this token; the pass reads its lease as no lane's data.
const retentionToken = "=retention"

// ClaimRetention takes the retention pass's lease for the worker info
// names; ErrHeld means another worker runs the pass. Its holder renews it
// before each pass (ErrLeaseLost: it lapsed and another may have taken it)
// and releases it when it stops; a holder that died leaves it to lapse
// after LeaseTTL.
func (l *Lanes) ClaimRetention(ctx context.Context, info LeaseInfo) (*Lease, error) {
	return l.Acquire(ctx, retentionToken, info)
}
