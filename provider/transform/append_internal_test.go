package transform

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// appendTargets are the targets of the Appender tests: randomConversation's
// two models, with and without id rewriting.
var appendTargets = []struct {
	key  string
	m    provider.Model
	norm func(string) string
}{
	{"m1", provider.Model{ID: "m1", Provider: "acme", API: "openai-completions"}, nil},
	{"m1/ids", provider.Model{ID: "m1", Provider: "acme", API: "openai-completions"}, func(id string) string { return SanitizeID(id, 16) }},
	{"m2/ids", provider.Model{ID: "m2", Provider: "other", API: "openai-responses"}, func(id string) string { return SanitizeID(id, 6) }},
}

// checkAppender plays a session driven by ops through one Appender, as
// a caller that keeps its history in one array does: each turn's
// messages go after the history in its spare capacity and are promised
// only once the turn is over. Some ops switch the target, start another
// array (a compaction, a rollback: new contents), roll back within the
// array without writing, or promise less. Every result must be
// Messages' for the same list, and the messages a result promised never
// to write again must be unchanged after every later call.
func checkAppender(t *testing.T, seed uint64, ops []byte) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var a Appender
	target := appendTargets[0]
	hist := make([]message.Message, 0, 8) // the promised history
	turn := 0                             // messages of the current turn after it
	type promise struct {
		msgs []message.Message
		want []message.Message
	}
	var promised []promise
	for step, op := range ops {
		switch op % 8 {
		case 0, 1, 2: // the turn adds messages
			add := randomConversation(rng, 1+rng.IntN(4))
			all := append(hist[:len(hist)+turn], add...)
			if &all[0] != &hist[:1][0] {
				// The array grew: a new one, as the caller's append makes.
				hist = all[:len(hist)]
			}
			turn += len(add)
		case 3: // the turn ends: its messages join the history
			hist = hist[:len(hist)+turn]
			turn = 0
		case 4:
			target = appendTargets[rng.IntN(len(appendTargets))]
		case 5: // another array: a compaction or a rollback
			k := rng.IntN(len(hist) + 1)
			next := make([]message.Message, 0, k+8)
			if rng.IntN(2) == 0 {
				next = append(next, message.User("summary", 0))
			}
			hist, turn = append(next, cloneAll(hist[:k])...), 0
		case 6: // the same array, shorter, nothing written
			hist, turn = hist[:rng.IntN(len(hist)+1)], 0
		case 7: // nothing new
		}
		msgs := hist[:len(hist)+turn]
		immutable := len(hist)
		if op >= 200 && immutable > 0 {
			immutable = rng.IntN(immutable) // a shorter promise
		}
		got, kept := a.Messages(msgs, immutable, target.key, target.m, target.norm)
		want := Messages(msgs, target.m, target.norm)
		if !reflect.DeepEqual(emptyBlocksNil(got), emptyBlocksNil(want)) {
			t.Fatalf("step %d (op %d, %d messages, %d promised): the result is not Messages':\n got %+v\nwant %+v", step, op, len(msgs), immutable, got, want)
		}
		if kept > len(got) {
			t.Fatalf("step %d: %d kept of %d", step, kept, len(got))
		}
		for _, p := range promised {
			for k := range p.msgs {
				if !reflect.DeepEqual(p.msgs[k], p.want[k]) {
					t.Fatalf("step %d (op %d): message %d of %d promised never to be written again was:\n got %+v\nwant %+v", step, op, k, len(p.msgs), p.msgs[k], p.want[k])
				}
			}
		}
		if kept > 0 {
			promised = append(promised, promise{got[:kept], slices.Clone(got[:kept])})
		}
		if len(promised) > 8 {
			promised = promised[1:]
		}
		if op%8 == 6 {
			// A rollback within the array must not be appended to: the
			// caller made a promise of what follows.
			hist = append(make([]message.Message, 0, len(hist)+8), hist...)
		}
	}
}

// TestAppenderMatchesMessages plays random sessions (see checkAppender):
// with any of the Appender's checks of what it keeps left out (the
// array, the promise's length, the key), some result differs from
// Messages'.
func TestAppenderMatchesMessages(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 200 {
		ops := make([]byte, 40+rng.IntN(60))
		for i := range ops {
			ops[i] = byte(rng.IntN(256))
		}
		t.Run(fmt.Sprint(round), func(t *testing.T) { checkAppender(t, uint64(round), ops) })
	}
}

// TestAppenderPreparesOnlyNew requires a long session's turns to prepare
// only their messages: the same array keeps its state, and the result is
// the caller's array itself while nothing changes.
func TestAppenderPreparesOnlyNew(t *testing.T) {
	t.Parallel()
	target := appendTargets[1]
	var a Appender
	hist := make([]message.Message, 0, 64)
	hist = append(hist, message.User("hi", 1))
	for i := range 20 {
		msgs := append(hist, message.User(fmt.Sprint("turn ", i), 2))
		got, kept := a.Messages(msgs, len(hist), target.key, target.m, target.norm)
		if &got[0] != &msgs[0] || kept != len(hist) {
			t.Fatalf("turn %d: result copied or %d kept of %d", i, kept, len(hist))
		}
		hist = msgs
	}
	if a.Starts != 1 {
		t.Errorf("%d starts over 20 turns of one array, want 1", a.Starts)
	}
}

// FuzzAppender is checkAppender on any sequence of ops.
func FuzzAppender(f *testing.F) {
	f.Add([]byte{0, 0, 3, 0, 3, 4, 0, 3, 5, 0, 6, 0, 3, 7, 200, 0, 3})
	f.Add([]byte{1, 2, 3, 1, 3, 12, 1, 3, 13, 1, 14, 1, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 8 || len(data) > 400 {
			return
		}
		checkAppender(t, binary.LittleEndian.Uint64(data), data[8:])
	})
}
