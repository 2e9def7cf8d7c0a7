package kvstore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A run's step journal lives in its own stream, StepsStream, apart from the
// lanes bucket: with sync always every write of one stream waits for the
// fsync of the one before it, and the journal's writes (a model reply that
// calls a tool, each tool result) would queue behind the lanes' leases and
// records. The journal of the turn started by inbound message seq of lane T
// is
//
//	agent.steps.T.<seq>.<n>   step n (from 1); writing step n again replaces it
//	agent.steps.T.<seq>.b     a barrier: a re-run's claim of the journal
//
// The lease cannot fence a write of another stream, so the journal fences
// itself: every write expects the last message on agent.steps.T.<seq>.> to
// be the writer's own previous one (none before its first). A re-run reads
// the journal, then writes a barrier over what it read before it records
// anything: from then on an older owner still running the turn (a zombie
// whose lease lapsed) expects a stale sequence and cannot add a step, and a
// step it added before the barrier is read by the re-run (the barrier fails
// and the journal is read again). Once the turn commits, its journal is
// purged (off the turn's path); the stream's MaxAge (StepTTL) and byte
// limit drop whatever a purge missed.

// Journal stream names.
const (
	StepsStream = "AGENT_STEPS"
	StepsPrefix = "agent.steps."
	// DefaultStepsMaxBytes caps the journal stream. A full stream drops
	// its oldest steps: those of long-committed turns whose purge failed,
	// or of turns older than any re-run.
	DefaultStepsMaxBytes = 512 << 20
)

// StepTTL is how long a journal step is kept; a turn retried later than
// that (its worker gone for a day) starts over.
const StepTTL = 24 * time.Hour

// MaxStepReads bounds the messages one read of a journal takes.
const MaxStepReads = 16384

// barrierToken is the last subject token of a barrier (steps are numbers).
const barrierToken = "b"

// ensureSteps creates or updates the journal stream.
func ensureSteps(ctx context.Context, js jetstream.JetStream, cfg Config) (jetstream.Stream, error) {
	sc := jetstream.StreamConfig{
		Name:        StepsStream,
		Description: "Lanefleet step journals: agent.steps.<lane>.<inbound seq>.<step>",
		Subjects:    []string{StepsPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		MaxAge:      StepTTL,
		MaxBytes:    cfg.StepsMaxBytes,
		Discard:     jetstream.DiscardOld,
		// A step written again, and a later re-run's barrier, replace
		// the older copy: a read fetches each subject once.
		MaxMsgsPerSubject: 1,
		AllowDirect:       DirectGet(cfg.Replicas), // a re-run reads what the leader has
	}
	s, err := EnsureStream(ctx, js, sc)
	if err != nil {
		return nil, fmt.Errorf("kvstore: stream %s: %w", StepsStream, err)
	}
	return s, nil
}

// EnsureStream makes the stream cfg describes: it leaves it alone when
// it already has cfg (sameStream), updates it to cfg otherwise, and
// creates it when there is none. An update is not sent for nothing: a
// worker that restarts re-ensures every stream, and an update rewrites
// the stream's store configuration under its consumers (nats-server
// v2.15.2 raced fileStore.UpdateConfig against a consumer's store being
// made, seen under -race in integration TestScheduleAcrossWorkerFaults).
// The update comes before any create because JetStream checks a create's
// byte reservation before it finds the stream exists: a worker joining a
// fleet whose store is reserved in full would be refused a stream that is
// there.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	if s, err := js.Stream(ctx, cfg.Name); err == nil && sameStream(cfg, s.CachedInfo().Config) {
		return s, nil
	}
	s, err := js.UpdateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, cfg)
		if err != nil && RacedCreate(err, func() (uerr error) { s, uerr = js.UpdateStream(ctx, cfg); return uerr }) {
			err = nil
		}
	}
	return s, err
}

// sameStream reports whether a stream configured as have already has
// cfg: have equals cfg with the defaults the server fills in for the
// limits cfg leaves zero, the server's own metadata ("_nats.*") aside.
// Any other difference, a field set elsewhere (by hand, by an older
// version) included, says no, and EnsureStream updates: a needless
// update costs a request, a missed one a stream not as configured.
func sameStream(cfg, have jetstream.StreamConfig) bool {
	want := cfg
	for _, lim := range []*int64{&want.MaxMsgs, &want.MaxBytes, &want.MaxMsgsPerSubject} {
		if *lim == 0 {
			*lim = -1
		}
	}
	if want.MaxConsumers == 0 {
		want.MaxConsumers = -1
	}
	if want.MaxMsgSize == 0 {
		want.MaxMsgSize = -1
	}
	if want.Replicas == 0 {
		want.Replicas = 1
	}
	if want.Duplicates == 0 && want.Mirror == nil {
		// The server's default window, or MaxAge when that is shorter
		// (an account's own limit differs: then this updates).
		want.Duplicates = 2 * time.Minute
		if want.MaxAge > 0 && want.MaxAge < want.Duplicates {
			want.Duplicates = want.MaxAge
		}
	}
	want.Metadata, have.Metadata = ownMetadata(want.Metadata), ownMetadata(have.Metadata)
	return reflect.DeepEqual(want, have)
}

// ownMetadata is a stream's metadata without the server's ("_nats.*"),
// nil when none is left.
func ownMetadata(m map[string]string) map[string]string {
	var out map[string]string
	for k, v := range m {
		if !strings.HasPrefix(k, "_nats.") {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// RacedCreate reports whether a failed create (err) lost a race with
// another worker's create of the same stream or bucket: found, run after
// the failure, finds it (and binds it for the caller). JetStream answers
// the loser with "already in use" when the reservation still fits, and
// with "insufficient storage resources" when the store is reserved in
// full, so the error alone does not tell.
func RacedCreate(err error, found func() error) bool {
	return err != nil && found() == nil
}

// Journal is the step journal of one turn (lane token, inbound sequence)
// as one attempt sees it: the sequence of its own last write fences the
// next one.
type Journal struct {
	lanes  *Lanes
	token  string
	seq    uint64
	prefix string // agent.steps.T.<seq>.

	mu   sync.Mutex
	last uint64 // stream sequence of this attempt's last journal write (or of the last message it read)
}

// Journal returns the journal of the turn of lane token started by inbound
// message seq, for an attempt that has neither read nor written it yet.
func (l *Lanes) Journal(token string, seq uint64) *Journal {
	return &Journal{lanes: l, token: token, seq: seq, prefix: StepsPrefix + token + "." + strconv.FormatUint(seq, 10) + "."}
}

// Steps reads the journal's steps from 1 up to the first missing one (leader
// reads, one request per message the journal has), then claims the journal
// with a barrier: no older owner can add to it afterwards. Steps written
// before the barrier are read again until the barrier holds.
func (j *Journal) Steps(ctx context.Context) ([][]byte, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for attempt := 0; ; attempt++ {
		steps, last, err := j.read(ctx)
		if err != nil {
			return nil, err
		}
		ack, err := j.lanes.js.Publish(ctx, j.prefix+barrierToken, nil,
			jetstream.WithExpectLastSequenceForSubject(last, j.prefix+">"))
		if err == nil {
			j.last = ack.Sequence
			return steps, nil
		}
		busy, mismatch := WriteConflict(err)
		if (!busy && !mismatch) || attempt >= maxConflicts {
			return nil, fmt.Errorf("kvstore: claim steps %s/%d: %w", j.token, j.seq, err)
		}
		if busy {
			if perr := pause(ctx, attempt); perr != nil {
				return nil, fmt.Errorf("kvstore: claim steps %s/%d: %w", j.token, j.seq, err)
			}
		}
		// mismatch: a step landed after the read; read it too.
	}
}

// read takes the journal's steps in order and the sequence of its last
// message.
func (j *Journal) read(ctx context.Context) (steps [][]byte, last uint64, err error) {
	if j.lanes.steps == nil {
		return nil, 0, fmt.Errorf("kvstore: steps %s/%d: no journal stream bound", j.token, j.seq)
	}
	filter := j.prefix + ">"
	byN := map[int][]byte{}
	for from, reads := uint64(1), 0; reads < MaxStepReads; reads++ {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		raw, err := j.lanes.steps.GetMsg(rctx, from, jetstream.WithGetMsgSubject(filter))
		cancel()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, 0, fmt.Errorf("kvstore: steps %s/%d: %w", j.token, j.seq, err)
		}
		from, last = raw.Sequence+1, raw.Sequence
		n, err := strconv.Atoi(strings.TrimPrefix(raw.Subject, j.prefix))
		if err != nil || n < 1 || n > MaxStepReads || len(raw.Data) == 0 {
			continue // a barrier
		}
		byN[n] = raw.Data
	}
	steps = make([][]byte, 0, len(byN))
	for n := 1; byN[n] != nil; n++ {
		steps = append(steps, byN[n])
	}
	return steps, last, nil
}

// Put records step n (from 1), replacing any step n recorded before. It
// fails with ErrLeaseLost when the journal moved on since this attempt's
// last read or write: another owner runs the turn.
func (j *Journal) Put(ctx context.Context, n int, data []byte) error {
	if n < 1 || n > MaxStepReads {
		return fmt.Errorf("kvstore: step %d of %s/%d: out of range", n, j.token, j.seq)
	}
	if len(data) == 0 {
		return fmt.Errorf("kvstore: step %d of %s/%d: empty", n, j.token, j.seq)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	subj := j.prefix + strconv.Itoa(n)
	for attempt := 0; ; attempt++ {
		ack, err := j.lanes.js.Publish(ctx, subj, data, jetstream.WithExpectLastSequenceForSubject(j.last, j.prefix+">"))
		if err == nil {
			j.last = ack.Sequence
			return nil
		}
		busy, mismatch := WriteConflict(err)
		switch {
		case mismatch:
			return fmt.Errorf("%w: %s: step %d of turn %d refused (another owner claimed its journal): %v", ErrLeaseLost, j.token, n, j.seq, err)
		case busy && attempt < maxConflicts:
			if perr := pause(ctx, attempt); perr != nil {
				return fmt.Errorf("kvstore: step %d of %s/%d: %w", n, j.token, j.seq, err)
			}
			continue
		}
		return fmt.Errorf("kvstore: step %d of %s/%d: %w", n, j.token, j.seq, err)
	}
}

// Written reports whether this attempt read or wrote the journal (a turn
// that never did has nothing to drop).
func (j *Journal) Written() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.last != 0
}

// Drop purges the journal of a committed turn.
func (j *Journal) Drop(ctx context.Context) error {
	if j.lanes.steps == nil {
		return nil
	}
	if err := j.lanes.steps.Purge(ctx, jetstream.WithPurgeSubject(j.prefix+">")); err != nil {
		return fmt.Errorf("kvstore: drop steps %s/%d: %w", j.token, j.seq, err)
	}
	return nil
}

// dropLane purges every journal of a lane (its session is forgotten).
func (l *Lanes) dropLane(ctx context.Context, token string) error {
	if l.steps == nil {
		return nil
	}
	if err := l.steps.Purge(ctx, jetstream.WithPurgeSubject(StepsPrefix+token+".>")); err != nil {
		return fmt.Errorf("kvstore: drop steps of %s: %w", token, err)
	}
	return nil
}
