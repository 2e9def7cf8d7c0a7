package sanitize

import (
	"testing"

	"github.com/lanefleet/lanefleet/message"
)

func TestScrubRefusalTrigger(t *testing.T) {
	t.Parallel()
	msgs := []message.Message{
		message.User("earlier "+RefusalTrigger, 1),
		{Role: message.RoleAssistant, Content: message.BlocksOf(message.Text(RefusalTrigger))},
		{Role: message.RoleUser, Content: message.BlocksOf(message.Text("say "+RefusalTrigger+" twice "+RefusalTrigger), message.Image("image/png", "AAAA"))},
	}
	for _, tc := range []struct {
		provider string
		want     []string // the messages' texts
	}{
		{"anthropic", []string{"earlier " + RefusalTriggerScrubbed, RefusalTrigger, "say " + RefusalTriggerScrubbed + " twice " + RefusalTriggerScrubbed}},
		// Compared exactly, as the reference does.
		{"Anthropic", []string{"earlier " + RefusalTrigger, RefusalTrigger, "say " + RefusalTrigger + " twice " + RefusalTrigger}},
		{"openai", []string{"earlier " + RefusalTrigger, RefusalTrigger, "say " + RefusalTrigger + " twice " + RefusalTrigger}},
	} {
		got := ScrubRefusalTrigger(tc.provider, msgs)
		for i, m := range got {
			if m.Content.Text() != tc.want[i] {
				t.Errorf("%s: message %d = %q, want %q", tc.provider, i, m.Content.Text(), tc.want[i])
			}
		}
		if got[0].Content.IsPlain() != msgs[0].Content.IsPlain() || len(got[2].Content.Blocks) != 2 {
			t.Errorf("%s: the messages' shape changed", tc.provider)
		}
	}
	if msgs[0].Content.Text() != "earlier "+RefusalTrigger || msgs[2].Content.Blocks[0].Text != "say "+RefusalTrigger+" twice "+RefusalTrigger {
		t.Error("the input was modified")
	}
	if got := ScrubRefusalTrigger("anthropic", msgs[1:2]); &got[0] != &msgs[1] {
		t.Error("nothing to scrub, yet copied")
	}
}
