package queue_test

import (
	"fmt"
	"time"

	"github.com/lanefleet/lanefleet/lanes/queue"
)

// The lane owner asks PlanTurn at each turn boundary, reading and waiting
// as it is told, then carries out the plan.
func ExamplePlanTurn() {
	t0 := time.Unix(1750000000, 0)
	s := queue.Settings{Mode: queue.ModeCollect, Debounce: time.Second, Cap: 20, Drop: queue.DropSummarize}
	// Two collect messages queued while the previous turn ran (it ended at
	// t0+300ms).
	lane := []queue.Msg{
		{Seq: 7, At: t0, Kind: queue.KindPrompt, Mode: queue.ModeCollect, Prompt: "hi"},
		{Seq: 8, At: t0.Add(200 * time.Millisecond), Kind: queue.KindPrompt, Mode: queue.ModeCollect, Prompt: "are you there?"},
	}
	in := queue.Input{Pending: lane[:1], Settings: s, LastEnd: t0.Add(300 * time.Millisecond), Now: t0.Add(400 * time.Millisecond)}
	fmt.Println(queue.PlanTurn(in).Verb) // is there more behind the first?
	in.Pending = lane
	fmt.Println(queue.PlanTurn(in).Verb)
	in.Complete = true // nothing more on the lane
	p := queue.PlanTurn(in)
	fmt.Println(p.Verb, p.Until.Sub(t0))
	in.Now = p.Until // quiet for the debounce
	p = queue.PlanTurn(in)
	fmt.Println(p.Verb, "as run", p.Run.Seq, "through", p.Through)
	fmt.Println(p.Prompt)
	// Output:
	// read
	// read
	// wait 1.2s
	// run as run 7 through 8
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
