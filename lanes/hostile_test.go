package lanes

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/message"
)

// bomb is issue 10's 13 bytes: a map whose "images" array declares 2^32-1
// elements.
var bomb = []byte{0x81, 0xa6, 'i', 'm', 'a', 'g', 'e', 's', 0xdd, 0xff, 0xff, 0xff, 0xff}

// deepPayload nests arrays a million levels deep.
var deepPayload = append(bytes.Repeat([]byte{0x91}, 1<<20), 0xc0)

func (f *fleet) publishRaw(t *testing.T, key string, data []byte) uint64 {
	t.Helper()
	subj, _ := events.InboundSubject(key)
	ack, err := f.js.Publish(t.Context(), subj, data)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// TestHostilePayloadsOnTheLane: the attacks of issue 10 end their runs with
// invalid_input and a dead letter each, the worker stays up, and the lane
// runs its next message. One of them arrives while a turn runs, so the
// interrupt watcher (which decodes every message published to the lane)
// meets it first: an interrupt sent after it still cuts the turn short.
func TestHostilePayloadsOnTheLane(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	started := make(chan struct{})
	echo := &echoHandler{}
	f.startWorker(t, HandlerFunc(func(ctx context.Context, turn *Turn) (*Outcome, error) {
		if turn.Inbound.Text == "hold" {
			close(started)
			<-ctx.Done()
			return nil, context.Cause(ctx)
		}
		return echo.HandleTurn(ctx, turn)
	}), Config{})
	hold := f.publish(t, "h", "hold")
	<-started
	runs := []uint64{f.publishRaw(t, "h", bomb), f.publishRaw(t, "h", deepPayload)}
	stop := f.publishMode(t, "h", "stop", "interrupt")
	if k := finalErr(f.waitFinal(t, "h", hold)); k != events.KindInterrupted {
		t.Fatalf("held turn ended with %q, want interrupted", k)
	}
	// The interrupt dropped what queued before it; the attacks again, now
	// read by the lane owner itself.
	runs = append(runs, f.publishRaw(t, "h", bomb), f.publishRaw(t, "h", deepPayload))
	for i, want := range []string{events.KindInterrupted, events.KindInterrupted, "invalid_input", "invalid_input"} {
		ev := f.waitFinal(t, "h", runs[i])
		if k := finalErr(ev); k != want {
			t.Fatalf("run %d ended with %q, want %q", runs[i], k, want)
		}
		if want == "invalid_input" && !strings.Contains(ev.Data.Result.Meta.Error.Message, "malformed msgpack") {
			t.Fatalf("run %d error = %q", runs[i], ev.Data.Result.Meta.Error.Message)
		}
	}
	if got := f.waitFinal(t, "h", stop).Data.Result.Payloads[0].Text; got != "ok stop" {
		t.Fatalf("interrupt message = %q", got)
	}
	next := f.publish(t, "h", "still there?")
	if got := f.waitFinal(t, "h", next).Data.Result.Payloads[0].Text; got != "ok still there?" {
		t.Fatalf("next message = %q", got)
	}
	info, err := f.streams.Dead.Info(t.Context(), jetstream.WithSubjectFilter(events.DeadPrefix+">"))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[events.DeadPrefix+"invalid"]; n != 2 {
		t.Fatalf("invalid dead letters = %d, want 2 (%v)", n, info.State.Subjects)
	}
}

// TestCorruptRecordsDoNotStopTheLane: transcript records that do not decode
// are skipped, with an error in the log, whether the newest one (the lane's
// cursor) or older ones: the lane goes on after them, and its next turn
// sees the history without them.
func TestCorruptRecordsDoNotStopTheLane(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	var (
		histories = make(chan []message.Entry, 10)
		echo      = &echoHandler{}
	)
	h := HandlerFunc(func(ctx context.Context, turn *Turn) (*Outcome, error) {
		histories <- turn.History
		return echo.HandleTurn(ctx, turn)
	})
	stop := f.startWorker(t, h, Config{})
	var seqs []uint64
	for _, text := range []string{"zero", "one", "two"} {
		seqs = append(seqs, f.publish(t, "r", text))
	}
	f.waitFinal(t, "r", seqs[2])
	stop() // the next worker reads the lane from the bucket
	for range seqs {
		<-histories
	}

	kv, err := f.js.KeyValue(t.Context(), kvstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := events.KeyToken("r")
	// Turn "two" is the newest record: the cursor's.
	for seq, v := range map[uint64][]byte{seqs[0]: deepPayload, seqs[2]: bomb} {
		if _, err := kv.Put(t.Context(), tok+".tx."+strconv.FormatUint(seq, 10), v); err != nil {
			t.Fatal(err)
		}
	}
	f.startWorker(t, h, Config{})
	three := f.publish(t, "r", "three")
	if got := f.waitFinal(t, "r", three).Data.Result.Payloads[0].Text; got != "ok three" {
		t.Fatalf("turn after corrupt records = %q", got)
	}
	if hist := <-histories; len(hist) != 2 || hist[0].Message.Content.Text() != "one" {
		t.Fatalf("history of turn three = %d entries, want turn one's 2", len(hist))
	}
	recs, err := f.lanes.Records(t.Context(), tok)
	if !errors.Is(err, kvstore.ErrCorrupt) || len(recs) != 2 || recs[1].InboundSeq != three {
		t.Fatalf("records = %d, %v; want turns one and three, and an error for the others", len(recs), err)
	}
}
