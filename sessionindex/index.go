// Package sessionindex is the fleet's index of sessions by their last
// activity, so that a listing's page costs what the page holds, not what
// the fleet holds: the stream AGENT_SESSIONS keeps one message per session
// (MaxMsgsPerSubject 1) on
//
//	agent.idx.<group>.<lane token>
//
// which a worker publishes when a turn commits and when a session's first
// turn starts (Touch, fire-and-forget: the turn never waits for it), with
// the state summary the listing shows (Record), and, for a session not
// listed yet, when its message is first delivered (Queued: a session is
// listed while its first message waits). A newer message of a
// session replaces its older one, so the stream read backwards from its
// last sequence is the sessions newest first (Newest: batched direct gets
// of windows below a cursor), and a session's entry leaves with it
// (Remove, called when the session is forgotten).
//
// <group> is the key's text up to its first ':' ("acme:" of
// "acme:support:42"), encoded as a lane token, or "-" for a key without
// one: a scope of the usual shape (one tenant's prefix "acme:") is a
// subject filter the server applies (Filter), so a tenant's page does not
// read other tenants' sessions.
//
// index.go holds the stream, its subjects and the writes; read.go the
// newest-first reads.
package sessionindex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/directget"
)

// The stream and its subjects.
const (
	// Stream is the index's stream.
	Stream = "AGENT_SESSIONS"
	// Prefix opens every subject: agent.idx.<group>.<lane token>.
	Prefix = "agent.idx."
	// NoGroup is the group of a key without ':'.
	NoGroup = "-"
	// DefaultMaxBytes caps the stream when neither its limit nor the
	// lanes bucket's is given: about 2.5 million sessions' entries (a
	// subject of up to 350 bytes and a record of about 20). A full index
	// drops its oldest entries: the sessions idle the longest leave the
	// listing first.
	DefaultMaxBytes = 256 << 20
	// lanesShare is the index's default share of the lanes bucket's
	// limit: 256 MiB of its default 4 GiB. Every listed session has its
	// lease and cursor there (and its transcript), so an index of a
	// sixteenth holds about as many sessions as the bucket, and in an
	// account whose operator sized the bucket to fit it fits too.
	lanesShare = 16
	// maxRecordBytes bounds a record (its parent's key, escaped, is the
	// most of it).
	maxRecordBytes = 2048
)

// Config configures Ensure.
type Config struct {
	Replicas int // default 1
	// MaxBytes caps the stream; 0 = a sixteenth of LanesMaxBytes
	// (MaxBytes), -1 = none. MaxMsgsPerSubject 1 bounds it by the number
	// of sessions besides.
	MaxBytes int64
	// LanesMaxBytes is the lanes bucket's limit (kvstore.Config.MaxBytes:
	// 0 its default, -1 none), the default's measure.
	LanesMaxBytes int64
	// Logger gets the failures of the writes nobody waits for.
	Logger zerolog.Logger
}

// Index is the session index of one fleet.
type Index struct {
	js     jetstream.JetStream
	nc     *nats.Conn
	stream jetstream.Stream
	log    zerolog.Logger
	api    string // the direct get subject of the stream

	ackSub   *nats.Subscription // the acks of Touch's publishes
	ackInbox string
	failed   atomic.Int64
	listed   listedSet
}

// listedSetMax bounds listedSet: 64Ki hashes, about a megabyte.
const listedSetMax = 1 << 16

// listedSet remembers, by a hash of their subjects, the sessions this
// index wrote an entry of (Touch, Queued), so that Queued skips them. A
// session is marked when its write goes out and unmarked when the write
// fails (its ack names the hash), so a failed write does not keep it
// unlisted until its turn starts:
// most messages are of listed sessions, and a conditional write that the
// server refuses cost each turn about a quarter of a millisecond
// (lanebench listing). It is cleared when full, and forgets a session
// this index removes; a session another worker forgot is listed again at
// its turn's start rather than while its message waits.
//
// Each write's ack settles it once: a session's mark holds the random tag
// of its newest write until that write's ack comes (0 after), and only an
// ack naming that tag counts (settle). An ack anyone else publishes to
// the acks' inbox (forged: a guess, or the reply subject of a write seen
// on the index's subjects, sent again once the server's ack came) names
// no write awaiting its ack, so it unmarks nothing and makes no session
// be written again. Only a client that sees the index's writes and
// answers one before the server does could still unmark its session
// (under the permission model, the admin role alone sees them).
type listedSet struct {
	mu   sync.Mutex
	seed maphash.Seed
	m    map[uint64]uint64 // subject hash → the tag of its write awaiting its ack, 0 when none
}

// mark notes subj as listed by a write that goes out now, and returns
// subj's hash and the write's tag; with ifNew (Queued) a listed subj is
// left as it is and the tag is 0: no write.
func (l *listedSet) mark(subj string, ifNew bool) (h, tag uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil || len(l.m) >= listedSetMax {
		l.m, l.seed = make(map[uint64]uint64), maphash.MakeSeed()
	}
	h = maphash.String(l.seed, subj)
	if _, ok := l.m[h]; ok && ifNew {
		return h, 0
	}
	tag = rand.Uint64() | 1 // never 0
	l.m[h] = tag
	return h, tag
}

// remove forgets subj.
func (l *listedSet) remove(subj string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, maphash.String(l.seed, subj))
}

// settle ends the wait for the ack of the write tag of the session of
// hash h: a failed write unmarks the session. It reports whether that
// write was awaiting its ack; else (an ack already settled, of a write a
// newer one overtook, made before the set was cleared, or forged) it
// changes nothing.
func (l *listedSet) settle(h, tag uint64, failed bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur, ok := l.m[h]; !ok || cur != tag || tag == 0 {
		return false
	}
	if failed {
		delete(l.m, h)
	} else {
		l.m[h] = 0
	}
	return true
}

// Record is an entry's data: the session's newest run, and the summary
// a listing shows of its state as of that run's start or commit.
type Record struct {
	// Run is the session's newest run (its message's inbound sequence).
	Run string `json:"run,omitempty"`
	// Committed says Run's turn committed and the fields below are the
	// session's state after it; else they are its state before it.
	Committed bool `json:"committed,omitempty"`
	// Through is the lane's cursor: the last inbound sequence processed.
	Through   uint64  `json:"through,omitempty"`
	Turns     int64   `json:"turns,omitempty"`
	CostUSD   float64 `json:"cost,omitempty"`
	Approvals int     `json:"approvals,omitempty"`
	Children  int     `json:"children,omitempty"`
	Parent    string  `json:"parent,omitempty"`
}

// Summarize is the record of a session whose run started (committed
// false: st is the state before it) or committed (st after it), its lane's
// cursor at through: the summary a listing shows of its state.
func Summarize(run string, committed bool, through uint64, st *events.SessionState) Record {
	rec := Record{Run: run, Committed: committed, Through: through}
	if st != nil {
		rec.Turns, rec.Approvals, rec.Children = st.Turns, len(st.Approvals), len(st.Children)
		if st.Parent != nil {
			rec.Parent = st.Parent.Session
		}
		if st.Usage != nil && st.Usage.Cost != nil {
			rec.CostUSD = st.Usage.Cost.Total
		}
	}
	return rec
}

// maxBytes is the stream's byte limit the config says, -1 none.
func (c Config) maxBytes() int64 {
	switch {
	case c.MaxBytes > 0:
		return c.MaxBytes
	case c.MaxBytes < 0, c.MaxBytes == 0 && c.LanesMaxBytes < 0:
		return -1
	case c.LanesMaxBytes == 0:
		return DefaultMaxBytes
	}
	return max(c.LanesMaxBytes/lanesShare, 64<<10) // room for entries of the largest size
}

// Ensure creates the index's stream when missing (or updates its limits)
// and binds to it. created reports a stream made now: the fleet fills it
// from what it stores already (Seed).
func Ensure(ctx context.Context, js jetstream.JetStream, cfg Config) (x *Index, created bool, err error) {
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	cfg.MaxBytes = cfg.maxBytes()
	sc := jetstream.StreamConfig{
		Name:              Stream,
		Description:       "Lanefleet session index: one entry per session, newest activity last",
		Subjects:          []string{Prefix + "*.*"},
		Storage:           jetstream.FileStorage,
		Replicas:          cfg.Replicas,
		MaxMsgsPerSubject: 1,
		MaxBytes:          cfg.MaxBytes,
		MaxMsgSize:        maxRecordBytes,
		Discard:           jetstream.DiscardOld,
		AllowDirect:       true,
	}
	s, err := js.Stream(ctx, Stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		s, err = js.CreateStream(ctx, sc)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s, err = js.Stream(ctx, Stream) // another worker made it meanwhile
		} else {
			created = err == nil
		}
	case err == nil:
		if cur := s.CachedInfo().Config; cur.MaxBytes != sc.MaxBytes || !cur.AllowDirect {
			s, err = js.UpdateStream(ctx, sc)
		}
	}
	if err != nil {
		return nil, false, fmt.Errorf("sessionindex: stream %s: %w", Stream, err)
	}
	x = &Index{js: js, nc: js.Conn(), stream: s, log: cfg.Logger, api: directget.Subject(js, Stream)}
	if err := x.listen(); err != nil {
		return nil, false, err
	}
	return x, created, nil
}

// Group is the group token of a key: its text up to and including the
// first ':', as a lane token, or NoGroup.
func Group(key string) string {
	i := strings.IndexByte(key, ':')
	if i < 0 {
		return NoGroup
	}
	tok, err := events.KeyToken(key[:i+1])
	if err != nil {
		return NoGroup // unreachable for a valid key
	}
	return tok
}

// Subject is the subject of a session's entry.
func Subject(key string) (string, error) {
	tok, err := events.KeyToken(key)
	if err != nil {
		return "", fmt.Errorf("sessionindex: %w", err)
	}
	return Prefix + Group(key) + "." + tok, nil
}

// Filter returns the subject filter of the entries a scope prefix can
// match, and whether every entry it matches has the prefix (exact: the
// prefix is a whole group, "acme:"). A prefix with text after its first
// ':' narrows to that group but is not exact; a prefix without ':' can
// match any group: the whole index. So does a prefix whose group no key
// has (not a key's text): Group would say NoGroup, the keys without ':'.
func Filter(prefix string) (filter string, exact bool) {
	i := strings.IndexByte(prefix, ':')
	if i < 0 {
		return Prefix + "*.*", prefix == ""
	}
	tok, err := events.KeyToken(prefix[:i+1])
	if err != nil {
		return Prefix + "*.*", false
	}
	return Prefix + tok + ".*", i == len(prefix)-1
}

// Touch publishes a session's entry: it is now its newest activity. It
// does not wait for the server: the publish goes out with the
// connection's next flush and its ack, when it says the write failed, is
// logged. Publishes of one connection reach the server in order, so an
// entry touched before a turn's commit reaches the server before it.
func (x *Index) Touch(key string, rec Record) {
	subj, err := Subject(key)
	if err != nil {
		return
	}
	data, _ := json.Marshal(rec)
	h, tag := x.listed.mark(subj, false)
	if err := x.nc.PublishMsg(&nats.Msg{Subject: subj, Reply: x.ackReply(h, tag), Data: data}); err != nil {
		x.listed.settle(h, tag, true)
		x.noteFailure(err)
	}
}

// Queued lists a session whose message waits for its turn, unless it is
// listed already: its entry (the message's run, no state) is written only
// where the session has none (an expected last sequence of 0), so a
// listed session keeps its place and summary until a turn moves it. Like
// Touch it does not wait; the refusal a listed session gets is the usual
// answer and is not logged. A session this index wrote an entry of
// lately is not written again (listedSet).
func (x *Index) Queued(key, run string) {
	subj, err := Subject(key)
	if err != nil {
		return
	}
	h, tag := x.listed.mark(subj, true)
	if tag == 0 {
		return
	}
	data, _ := json.Marshal(Record{Run: run})
	m := nats.NewMsg(subj)
	m.Reply, m.Data = x.ackReply(h, tag), data
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	if err := x.nc.PublishMsg(m); err != nil {
		x.listed.settle(h, tag, true)
		x.noteFailure(err)
	}
}

// ackReply is the reply subject of the write tag of the session whose
// listedSet hash is h: the acks' inbox, then h and tag, which the ack
// gives back to settle the write (listedSet.settle).
func (x *Index) ackReply(h, tag uint64) string {
	var buf [128]byte // the usual inbox, and two numbers of up to 13 digits
	b := append(append(buf[:0], x.ackInbox...), '.')
	b = append(strconv.AppendUint(b, h, 36), '.')
	return string(strconv.AppendUint(b, tag, 36))
}

// listen reads the acks of Touch's and Queued's publishes, all on one
// subscription, so a publish keeps no state of its own while its ack is
// on the way (its reply subject carries its session's hash and its
// write's tag, ackReply); an ack that says the write failed unmarks the
// session and is logged, but not Queued's refusal of a session that has
// an entry. Only the ack of a write awaiting it counts: any other
// message on the inbox (forged) changes nothing and is not logged.
func (x *Index) listen() error {
	inbox := x.nc.NewRespInbox()
	sub, err := x.nc.Subscribe(inbox+".*.*", func(m *nats.Msg) {
		var ack struct {
			Error *struct {
				Code        jetstream.ErrorCode `json:"err_code"`
				Description string              `json:"description"`
			} `json:"error"`
		}
		var failure error
		if err := json.Unmarshal(m.Data, &ack); err != nil {
			failure = fmt.Errorf("ack: %w", err)
		} else if ack.Error != nil && !wrongLast(ack.Error.Code) { // Queued's refusal: the session has its entry
			failure = errors.New(ack.Error.Description)
		}
		if x.settle(inbox, m.Subject, failure != nil) && failure != nil {
			x.noteFailure(failure)
		}
	})
	if err != nil {
		return fmt.Errorf("sessionindex: acks: %w", err)
	}
	x.ackInbox, x.ackSub = inbox, sub
	return nil
}

// settle settles the write whose ack came on reply (ackReply) under
// inbox (the handler's own copy, since x.ackInbox is set only after the
// subscription, which may already deliver), reporting whether it was a
// write awaiting its ack (listedSet.settle).
func (x *Index) settle(inbox, reply string, failed bool) bool {
	hs, tags, ok := strings.Cut(strings.TrimPrefix(reply, inbox+"."), ".")
	h, err1 := strconv.ParseUint(hs, 36, 64)
	tag, err2 := strconv.ParseUint(tags, 36, 64)
	return ok && err1 == nil && err2 == nil && x.listed.settle(h, tag, failed)
}

// wrongLast reports the refusal of a write that expected a subject's last
// sequence: 10071 (the subject has another), or 10164 on a replicated
// stream (another write with an expectation on the subject was in flight:
// the session is being listed by it).
func wrongLast(code jetstream.ErrorCode) bool {
	return code == jetstream.JSErrCodeStreamWrongLastSequence || code == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// Close stops reading acks.
func (x *Index) Close() error { return x.ackSub.Unsubscribe() }

// Failures counts the writes whose ack said they failed (a session's
// newest: the ack of a write a newer one of the session overtook is not
// told from a forged one, and is not counted).
func (x *Index) Failures() int64 { return x.failed.Load() }

// noteFailure logs a failed write: the session is listed again at its next
// turn.
func (x *Index) noteFailure(err error) {
	x.failed.Add(1)
	x.log.Warn().Err(err).Msg("sessionindex: an entry was not written: the session is listed again at its next turn")
}

// Seed writes a session's entry unless it has one: for filling a new
// index from what the fleet already stores, without moving a session that
// a turn touched meanwhile. A lost race (the session got an entry, or
// another conditional write of it was in flight) is no error.
func (x *Index) Seed(ctx context.Context, key, run string) error {
	subj, err := Subject(key)
	if err != nil {
		return err
	}
	data, _ := json.Marshal(Record{Run: run})
	_, err = x.js.Publish(ctx, subj, data, jetstream.WithExpectLastSequencePerSubject(0))
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && wrongLast(apiErr.ErrorCode) {
		return nil // touched meanwhile, or being listed by another write
	}
	if err != nil {
		return fmt.Errorf("sessionindex: seed: %w", err)
	}
	return nil
}

// Remove deletes a session's entry (it was forgotten).
func (x *Index) Remove(ctx context.Context, key string) error {
	subj, err := Subject(key)
	if err != nil {
		return err
	}
	x.listed.remove(subj)
	if err := x.stream.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
		return fmt.Errorf("sessionindex: remove: %w", err)
	}
	return nil
}

// Forgotten removes a forgotten session's entry; a failure is logged
// (the listing then shows the session, with nothing stored, until its
// entry is written again or dropped as the oldest).
func (x *Index) Forgotten(ctx context.Context, key string) {
	if err := x.Remove(ctx, key); err != nil {
		x.log.Warn().Err(err).Str("session", events.Fingerprint(key)).Msg("sessionindex: a forgotten session's entry stays")
	}
}

// Count is the number of entries.
func (x *Index) Count(ctx context.Context) (int, error) {
	info, err := x.stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("sessionindex: count: %w", err)
	}
	return int(info.State.Msgs), nil
}
