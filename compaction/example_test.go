package compaction_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet/compaction"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/sessionfile"
)

func Example() {
	// A session: an old turn that read a file, and a new question.
	parent := func(id string) *string { return &id }
	old := strings.Repeat("a long answer ", 300)
	entries := []message.Entry{
		{Type: message.EntryMessage, ID: "a1", Message: &message.Message{Role: message.RoleUser, Content: message.PlainText("What does main.go do?")}},
		{Type: message.EntryMessage, ID: "a2", ParentID: parent("a1"), Message: &message.Message{Role: message.RoleAssistant,
			Content: message.BlocksOf(message.ToolCall("t1", "read", map[string]any{"path": "main.go"})), StopReason: message.StopToolUse}},
		{Type: message.EntryMessage, ID: "a3", ParentID: parent("a2"), Message: &message.Message{Role: message.RoleToolResult,
			ToolCallID: "t1", ToolName: "read", Content: message.BlocksOf(message.Text(old))}},
		{Type: message.EntryMessage, ID: "a4", ParentID: parent("a3"), Message: &message.Message{Role: message.RoleUser, Content: message.PlainText("And util.go?")}},
	}

	// The session's model; here a stand-in that answers every summary
	// request the same way.
	summarizer := provider.Func(func(ctx context.Context, req *provider.Request, emit func(provider.Event)) (message.Message, error) {
		return message.Message{Role: message.RoleAssistant, StopReason: message.StopStop,
			Content: message.BlocksOf(message.Text("## Goal\nExplain the code."))}, nil
	})

	res, err := compaction.Compact(context.Background(), compaction.Request{
		Provider: summarizer,
		Model:    provider.Model{ID: "claude-sonnet-4-6", Provider: "anthropic", ContextWindow: 200000, MaxTokens: 64000},
		Entries:  entries,
		Settings: compaction.Settings{KeepRecentTokens: 10},
		Trigger:  compaction.TriggerManual,
		Now:      time.Date(2026, 3, 15, 11, 0, 0, 0, time.UTC),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("first kept:", res.FirstKeptEntryID, "parent:", *res.Entry.ParentID)
	fmt.Println(res.Summary)

	// Appended, the entry replaces the old turn by its summary.
	for _, m := range compaction.ConvertToLLM(sessionfile.Messages(append(entries, res.Entry))) {
		fmt.Printf("%s: %.60q\n", m.Role, m.Content.Text())
	}
	// Output:
	// first kept: a4 parent: a4
	// ## Goal
	// Explain the code.
	//
	// <read-files>
	// main.go
	// </read-files>
	// user: "The conversation history before this point was compacted int"
	// user: "And util.go?"
}
