package queue_test

import (
	"fmt"
	"time"

	"github.com/lanefleet/lanefleet/lanes/queue"
)

// A lane owner drives one Lane per owned session: Offer for each arriving
// message, Next whenever no turn runs.
func ExampleLane() {
	l := queue.NewLane(queue.Settings{Mode: queue.ModeCollect, Debounce: time.Second})
	t0 := time.Unix(1750000000, 0)

	// A turn is running when two messages arrive: both are queued.
	for i, text := range []string{"hi", "are you there?"} {
		out := l.Offer(queue.Item{Seq: uint64(i + 1), Prompt: text}, true, false, t0)
		fmt.Println(out.Action, out.Queued)
	}

	// The turn ended. Nothing is drained before the debounce time...
	_, ok := l.Next(t0.Add(500 * time.Millisecond))
	fmt.Println("early:", ok)

	// ...then both messages become one collected turn.
	at, _ := l.ReadyAt()
	turn, _ := l.Next(at)
	fmt.Println(turn.Kind, len(turn.Items))
	fmt.Println(turn.Prompt)
	// Output:
	// enqueue-followup true
	// enqueue-followup true
	// early: false
	// collected 2
	// [Queued messages while agent was busy]
	//
	// ---
	// Queued #1
	// hi
	//
	// ---
	// Queued #2
	// are you there?
}

// When the stream itself holds the pending messages, the owner reads them at
// a turn boundary and builds the next turn with Collect.
func ExampleCollect() {
	t0 := time.Unix(1750000000, 0)
	pending := []queue.Item{
		{Seq: 7, Prompt: "one", At: t0},
		{Seq: 8, Prompt: "two", At: t0},
		{Seq: 9, Prompt: "three", At: t0},
	}
	b, _ := queue.Collect(pending, queue.Settings{Mode: queue.ModeFollowup, Cap: 2, Drop: queue.DropOld})
	fmt.Println(b.Turn.Kind, b.Turn.Prompt)
	for _, d := range b.Dropped {
		fmt.Println("dropped", d.Item.Seq, "-", d.Reason)
	}
	fmt.Println("advance cursor to", b.Through)
	// Output:
	// single two
	// dropped 7 - queue full: oldest message evicted (drop policy old)
	// advance cursor to 8
}
