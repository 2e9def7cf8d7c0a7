package fleet

import (
	"testing"

	"github.com/lanefleet/lanefleet/agents"
)

// TestAgentDefinedJustBeforeItsFirstMessage: a session's first message
// reaches the worker before the worker's watcher delivered its agent's
// definition (here the watcher is stopped: the longest a delivery can
// lag). The turn runs as the agent, read from the bucket, instead of
// being refused with "agent x is not defined"; an agent that is not
// defined is still refused. In an in-process fleet under -race, at a load
// of about 3, 3 of 200 turns sent right after their agent's put were
// refused before the bucket was read.
func TestAgentDefinedJustBeforeItsFirstMessage(t *testing.T) {
	t.Parallel()
	m, c, ctx := runMember(t, Config{DataDir: t.TempDir(), DefaultModel: "scripted/echo", NoBuiltinTools: true, WorkerID: "w1"})
	if err := m.agents.Close(); err != nil { // no further deliveries
		t.Fatal(err)
	}
	if _, err := c.PutAgent(ctx, &agents.Agent{ID: "x"}); err != nil {
		t.Fatal(err)
	}
	if v := watch(t, ctx, c, "agent:x:first", "hello"); v.runErr != nil || len(v.result.Payloads) == 0 || v.result.Payloads[0].Text != "echo: hello" {
		t.Fatalf("the first turn of agent x: %+v, %v", v.result, v.runErr)
	}
	if v := watch(t, ctx, c, "agent:y:first", "hello"); v.runErr == nil {
		t.Fatalf("a turn of agent y, never defined, ran: %+v", v.result)
	}
}
