package chatcmd_test

import (
	"regexp"
	"testing"

	"github.com/lanefleet/lanefleet/chatcmd"
	"github.com/lanefleet/lanefleet/provider/failover"
	"github.com/lanefleet/lanefleet/runner"
)

// TestErrorTextsNameCommandsThatExist: the reference's error texts the
// fleet shows users tell them to "use /new" or "try /reset": every command
// they name must be one the worker answers, not a prompt for the model.
func TestErrorTextsNameCommandsThatExist(t *testing.T) {
	t.Parallel()
	texts := []string{failover.TextContextOverflow, failover.TextRoleOrdering, failover.TextMissingToolInput,
		runner.TextRetryLimit, runner.TextContextOverflow, runner.TextRoleOrdering}
	cmd := regexp.MustCompile(`(?:^|[\s(])(/[A-Za-z]+)\b`)
	named := 0
	for _, text := range texts {
		for _, m := range cmd.FindAllStringSubmatch(text, -1) {
			named++
			if _, ok := chatcmd.Parse(m[1]); !ok {
				t.Errorf("%q names %s, which is no chat command", text, m[1])
			}
		}
	}
	if named == 0 {
		t.Fatal("no text names a command: the pattern is wrong")
	}
}
