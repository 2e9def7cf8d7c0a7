package compaction

import (
	"fmt"
	"testing"

	"github.com/lanefleet/lanefleet/message"
)

// sessionFromScript builds a session from fuzz input, two bytes an entry:
// an operation and an argument (size, target or flag).
func sessionFromScript(script []byte) []message.Entry {
	var h hist
	var branchFrom *string
	noID := false
	for i := 0; i+1 < len(script); i += 2 {
		op, arg := script[i], int(script[i+1])
		n := len(h.entries)
		id := fmt.Sprintf("f%03d", n)
		var e message.Entry
		switch op % 12 {
		case 0:
			m := message.User(tok(arg*3), 1773570000000+int64(n))
			e = message.Entry{Type: message.EntryMessage, Message: &m}
		case 1, 2:
			var blocks []message.Block
			if op%12 == 1 || arg&1 == 0 {
				blocks = append(blocks, message.Text(tok(arg*2)))
			}
			if op%12 == 2 {
				blocks = append(blocks, message.ToolCall("c"+id, []string{"read", "edit", "write", "bash"}[arg%4],
					map[string]any{"path": fmt.Sprintf("f%d.go", arg%5)}))
			}
			stop := []message.StopReason{message.StopStop, message.StopToolUse, message.StopError, message.StopAborted}[arg%4]
			m := message.Message{Role: message.RoleAssistant, Content: message.BlocksOf(blocks...), StopReason: stop,
				Usage: &message.Usage{TotalTokens: int64(arg * 40)}, Timestamp: 1773570000000 + int64(n)}
			e = message.Entry{Type: message.EntryMessage, Message: &m}
		case 3:
			m := message.Message{Role: message.RoleToolResult, ToolCallID: "c", ToolName: "read",
				Content: message.BlocksOf(message.Text(tok(arg * 5))), Timestamp: 1773570000000 + int64(n)}
			e = message.Entry{Type: message.EntryMessage, Message: &m}
		case 4:
			e = message.Entry{Type: message.EntryModelChange, Fields: map[string]any{"provider": "p", "modelId": "m"}}
		case 5:
			e = message.Entry{Type: message.EntryCustomMessage, Fields: map[string]any{"customType": "x", "content": tok(arg), "display": true}}
		case 6:
			e = message.Entry{Type: message.EntryBranchSummary, Fields: map[string]any{"fromId": "root", "summary": tok(arg % 3 * arg)}}
		case 7:
			first := "missing"
			if n > 0 && arg < 250 {
				first = h.entries[arg%n].ID
			}
			e = message.Entry{Type: message.EntryCompaction, Fields: map[string]any{"summary": tok(arg), "firstKeptEntryId": first,
				"tokensBefore": int64(arg), "fromHook": arg&1 == 1,
				"details": map[string]any{"readFiles": []any{"r.go"}, "modifiedFiles": []any{"m.go", int64(3)}}}}
		case 8:
			m := message.Message{Role: RoleBashExecution, Timestamp: 1773570000000 + int64(n), Extra: map[string]any{
				"command": "make", "output": tok(arg), "exitCode": int64(arg % 3), "excludeFromContext": arg%5 == 0}}
			e = message.Entry{Type: message.EntryMessage, Message: &m}
		case 9:
			// The next entry branches off an earlier one.
			if n > 0 {
				p := h.entries[arg%n].ID
				branchFrom = &p
			}
			continue
		case 10:
			noID = arg%7 == 0 // the next entry has no id
			continue
		case 11:
			e = message.Entry{Type: message.EntryLabel, Fields: map[string]any{"targetId": id, "label": "l"}}
		}
		e.ID = id
		if noID {
			e.ID, noID = "", false
		}
		e.ParentID = branchFrom
		branchFrom = nil
		if e.ParentID == nil && n > 0 && h.entries[n-1].ID != "" {
			p := h.entries[n-1].ID
			e.ParentID = &p
		}
		h.add(e)
	}
	return h.entries
}

func FuzzPrepare(f *testing.F) {
	// Seeds mirror the cut-point table: user/assistant turns, tool calls
	// and results, settings entries, custom messages, bash runs, previous
	// compactions, branches and entries without ids.
	seeds := [][]byte{
		{0, 200, 1, 200, 0, 50, 1, 60},                                     // cut at a user message
		{0, 200, 2, 2, 3, 60, 1, 10},                                       // never at a tool result
		{0, 200, 1, 200, 0, 10, 2, 50, 3, 60},                              // tool results stay with their call
		{0, 200, 1, 200, 0, 10, 2, 2, 3, 250},                              // trailing tool result over budget
		{0, 200, 1, 200, 4, 0, 0, 50, 1, 60},                               // settings entries move with the cut
		{0, 200, 1, 200, 4, 0, 5, 5, 1, 120},                               // kept custom message starts the turn
		{0, 200, 1, 200, 8, 100, 1, 10},                                    // cut at a bash execution
		{0, 200, 1, 200, 0, 50, 7, 2, 1, 60, 0, 200, 1, 200, 0, 50, 1, 60}, // previous compaction
		{0, 200, 1, 200, 9, 1, 0, 250, 9, 1, 0, 50, 1, 60},                 // other branch ignored
		{0, 200, 10, 0, 0, 5},                                              // leaf without id
		{0, 200, 0, 20, 7, 1},                                              // just compacted
		{6, 40, 5, 30, 0, 100, 2, 1, 3, 100, 11, 0, 1, 30},                 // summaries and labels
	}
	for _, s := range seeds {
		f.Add(s, uint16(100))
	}
	f.Fuzz(func(t *testing.T, script []byte, keep uint16) {
		entries := sessionFromScript(script)
		s := Settings{KeepRecentTokens: int(keep%2000) + 1}
		p, err := Prepare(entries, s)
		if err != nil {
			return
		}
		checkPreparation(t, entries, p)
		// Nothing is lost: what is summarised, the prefix and what is kept
		// are the messages from the first entry considered on.
		all := len(entryMessages(p.path[p.start:]))
		kept := len(entryMessages(p.path[p.firstKept:]))
		if got := len(p.MessagesToSummarize) + len(p.TurnPrefixMessages) + kept; got != all {
			t.Fatalf("summarised %d + prefix %d + kept %d != %d messages", len(p.MessagesToSummarize), len(p.TurnPrefixMessages), kept, all)
		}
		res, err := Compact(t.Context(), Request{Provider: &fakeLLM{reply: summarizer}, Model: testModel, Entries: entries, Settings: s, Now: testNow})
		if err != nil {
			t.Fatalf("Compact after a successful Prepare: %v", err)
		}
		if res.TokensAfter > res.TokensBefore {
			t.Fatalf("tokens after %d > before %d", res.TokensAfter, res.TokensBefore)
		}
		checkRoundTrip(t, entries, res)
	})
}
