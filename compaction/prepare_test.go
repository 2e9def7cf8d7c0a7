package compaction

import (
	"errors"
	"slices"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/sessionfile"
)

func TestPrepareCutPoint(t *testing.T) {
	t.Parallel()
	read := func(id string) message.Block { return call(id, "read", map[string]any{"path": "x"}) }
	tests := []struct {
		name  string
		build func(h *hist)
		keep  int
		err   error
		// firstKept and turnStart are entry ids ("" = not split);
		// summarized and prefix count messages.
		firstKept, turnStart string
		summarized, prefix   int
	}{
		{
			name:  "empty session",
			build: func(h *hist) {},
			err:   ErrNothingToCompact,
		},
		{
			name:  "everything fits in what is kept",
			build: func(h *hist) { h.user(tok(10)); h.asst(tok(10)) },
			keep:  100,
			err:   ErrNothingToCompact,
		},
		{
			name: "just compacted",
			build: func(h *hist) {
				h.user(tok(200))
				first := h.user(tok(10))
				h.compaction("s", first, nil)
			},
			err: ErrAlreadyCompacted,
		},
		{
			// The budget is reached at u2: the turn it starts is kept whole.
			name: "cut at a user message",
			build: func(h *hist) {
				h.user(tok(200))
				h.asst(tok(200))
				h.user(tok(50)) // e03
				h.asst(tok(60))
			},
			keep: 100, firstKept: "e03", summarized: 2,
		},
		{
			// The budget is reached at a tool result: the cut moves forward
			// to the next message, never onto the result, and the turn
			// started before is split.
			name: "never at a tool result",
			build: func(h *hist) {
				h.user(tok(200))       // e01
				h.asst("", read("c1")) // e02
				h.result("c1", "read", tok(300))
				h.asst(tok(10)) // e04
			},
			keep: 100, firstKept: "e04", turnStart: "e01", summarized: 0, prefix: 3,
		},
		{
			// Cutting at the assistant that called a tool keeps its result.
			name: "tool results stay with their call",
			build: func(h *hist) {
				h.user(tok(200))
				h.asst(tok(200))
				h.user(tok(10))                                                     // e03
				h.asst(tok(50), call("c1", "read", map[string]any{"path": "a.go"})) // e04: 55 tokens
				h.result("c1", "read", tok(60))
			},
			keep: 100, firstKept: "e04", turnStart: "e03", summarized: 2, prefix: 1,
		},
		{
			// Only the trailing tool result is over budget: pi would keep
			// everything; the cut is at the last cut point instead.
			name: "trailing tool result over budget",
			build: func(h *hist) {
				h.user(tok(200))
				h.asst(tok(200))
				h.user(tok(10))        // e03
				h.asst("", read("c1")) // e04
				h.result("c1", "read", tok(500))
			},
			keep: 100, firstKept: "e04", turnStart: "e03", summarized: 2, prefix: 1,
		},
		{
			// Settings entries right before the cut go with the kept part,
			// and do not make the turn look split.
			name: "settings entries move with the cut",
			build: func(h *hist) {
				h.user(tok(200))
				h.asst(tok(200))
				h.setting() // e03
				h.user(tok(50))
				h.asst(tok(60))
			},
			keep: 100, firstKept: "e03", summarized: 2,
		},
		{
			// A custom_message is a turn start: kept, it leaves no prefix.
			name: "kept custom message starts the turn",
			build: func(h *hist) {
				h.user(tok(200))
				h.asst(tok(200))
				h.setting() // e03
				h.customMessage("note")
				h.asst(tok(120))
			},
			keep: 100, firstKept: "e03", summarized: 2,
		},
		{
			// A bashExecution message is a cut point and a turn start.
			name: "cut at a bash execution",
			build: func(h *hist) {
				h.user(tok(200))
				h.asst(tok(200))
				h.msg(message.Message{Role: RoleBashExecution, Extra: map[string]any{"command": "make", "output": tok(100), "exitCode": int64(0)}}) // e03
				h.asst(tok(10))
			},
			keep: 100, firstKept: "e03", summarized: 2,
		},
		{
			// The previous compaction's kept entries (from e03) are
			// summarised now; the compaction entry itself is not a message.
			name: "previous compaction",
			build: func(h *hist) {
				h.user(tok(200))
				h.asst(tok(200))
				first := h.user(tok(50)) // e03
				h.compaction("old summary", first, nil)
				h.asst(tok(60))
				h.user(tok(200))
				h.asst(tok(200))
				h.user(tok(50)) // e08
				h.asst(tok(60))
			},
			keep: 100, firstKept: "e08", summarized: 4,
		},
		{
			name: "previous compaction, nothing new",
			build: func(h *hist) {
				h.user(tok(200))
				first := h.user(tok(10))
				h.compaction("old summary", first, nil)
				h.asst(tok(10))
			},
			keep: 100, err: ErrNothingToCompact,
		},
		{
			// Only the current branch counts: the abandoned reply e03 is
			// neither summarised nor kept.
			name: "other branch ignored",
			build: func(h *hist) {
				h.user(tok(200))
				a := h.asst(tok(200))
				h.user(tok(5000))
				h.add(message.Entry{Type: message.EntryMessage, ParentID: &a, Message: &message.Message{Role: message.RoleUser, Content: message.PlainText(tok(50))}}) // e04
				h.asst(tok(60))
			},
			keep: 100, firstKept: "e04", summarized: 2,
		},
		{
			// A version 1 session without ids cannot name its entries.
			name: "leaf without id",
			build: func(h *hist) {
				h.user(tok(200))
				h.entries = append(h.entries, message.Entry{Type: message.EntryMessage, Message: &message.Message{Role: message.RoleUser, Content: message.PlainText("x")}})
			},
			err: ErrNoEntryID,
		},
		{
			// A header line in the entries is skipped.
			name: "header ignored",
			build: func(h *hist) {
				h.entries = append(h.entries, message.Entry{Type: message.EntrySession, ID: "0c9d5f2e-1111-4222-8333-944445555666", Version: 3})
				h.user(tok(200))
				h.asst(tok(200))
				h.user(tok(100)) // e04
			},
			keep: 100, firstKept: "e04", summarized: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var h hist
			tt.build(&h)
			p, err := Prepare(h.entries, Settings{KeepRecentTokens: tt.keep})
			if tt.err != nil || err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			if p.FirstKeptEntryID != tt.firstKept {
				t.Errorf("FirstKeptEntryID = %s, want %s", p.FirstKeptEntryID, tt.firstKept)
			}
			turnStart := ""
			if p.IsSplitTurn {
				turnStart = p.path[p.turnStart].ID
			}
			if turnStart != tt.turnStart {
				t.Errorf("turn start = %q, want %q", turnStart, tt.turnStart)
			}
			if len(p.MessagesToSummarize) != tt.summarized || len(p.TurnPrefixMessages) != tt.prefix {
				t.Errorf("summarised %d, prefix %d; want %d, %d", len(p.MessagesToSummarize), len(p.TurnPrefixMessages), tt.summarized, tt.prefix)
			}
			checkPreparation(t, h.entries, p)
		})
	}
}

// checkPreparation checks what must hold of every preparation: the first
// kept message is not a tool result, and compacting keeps exactly the
// branch from the first kept entry on.
func checkPreparation(t *testing.T, entries []message.Entry, p *Preparation) {
	t.Helper()
	branch := sessionfile.Branch(withoutHeaders(entries))
	i := slices.IndexFunc(branch, func(e message.Entry) bool { return e.ID == p.FirstKeptEntryID })
	if i < 0 {
		t.Fatalf("first kept entry %q is not on the branch %v", p.FirstKeptEntryID, ids(branch))
	}
	kept := entryMessages(branch[i:])
	if len(kept) > 0 && kept[0].Role == message.RoleToolResult {
		t.Errorf("the kept part starts with a tool result (entry %s)", p.FirstKeptEntryID)
	}
	leaf := p.LeafID
	c := message.Entry{Type: message.EntryCompaction, ID: "compact1", ParentID: &leaf, Fields: map[string]any{
		"summary": "s", "firstKeptEntryId": p.FirstKeptEntryID, "tokensBefore": int64(1)}}
	got := sessionfile.Messages(append(slices.Clip(entries), c))
	if len(got) == 0 || got[0].Role != sessionfile.RoleCompactionSummary {
		t.Fatalf("context does not start with the summary: %v", got)
	}
	if len(got)-1 != len(kept) {
		t.Fatalf("context keeps %d messages, want the %d from %s on", len(got)-1, len(kept), p.FirstKeptEntryID)
	}
	for k := range kept {
		if got[k+1].Role != kept[k].Role || got[k+1].Content.Text() != kept[k].Content.Text() {
			t.Fatalf("kept message %d = %s %q, want %s %q", k, got[k+1].Role, got[k+1].Content.Text(), kept[k].Role, kept[k].Content.Text())
		}
	}
}

func TestPrepareFiles(t *testing.T) {
	t.Parallel()
	var h hist
	h.user(tok(200))
	first := h.user(tok(10))
	// The previous compaction's lists carry over: its read files as read,
	// its modified files as modified.
	h.compaction("old", first, map[string]any{"readFiles": []any{"old-read.go", "c.go"}, "modifiedFiles": []any{"old-mod.go"}})
	h.asst("", call("c1", "read", map[string]any{"path": "a.go"}), call("c2", "read", map[string]any{"path": "b.go"}),
		call("c3", "edit", map[string]any{"path": "b.go"}), call("c4", "write", map[string]any{"path": "c.go"}),
		call("c5", "bash", map[string]any{"path": "ignored.sh"}), call("c6", "read", map[string]any{"file": "no-path.go"}))
	h.asst("", call("c7", "read", map[string]any{"path": "d.go"}))
	h.result("c7", "read", tok(10))
	h.user(tok(200))
	h.asst(tok(10))

	p, err := Prepare(h.entries, Settings{KeepRecentTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	// Read and then modified counts as modified only.
	if want := []string{"a.go", "d.go", "old-read.go"}; !slices.Equal(p.ReadFiles, want) {
		t.Errorf("ReadFiles = %v, want %v", p.ReadFiles, want)
	}
	if want := []string{"b.go", "c.go", "old-mod.go"}; !slices.Equal(p.ModifiedFiles, want) {
		t.Errorf("ModifiedFiles = %v, want %v", p.ModifiedFiles, want)
	}
	if p.PreviousSummary != "old" {
		t.Errorf("PreviousSummary = %q", p.PreviousSummary)
	}

	// An extension's compaction (fromHook) has details of its own making.
	h.entries[2].Fields["fromHook"] = true
	p, err = Prepare(h.entries, Settings{KeepRecentTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.ReadFiles, []string{"a.go", "d.go"}) || !slices.Equal(p.ModifiedFiles, []string{"b.go", "c.go"}) {
		t.Errorf("fromHook details used: read %v modified %v", p.ReadFiles, p.ModifiedFiles)
	}
}

func TestPrepareTokensBefore(t *testing.T) {
	t.Parallel()
	var h hist
	h.user(tok(200))
	h.msg(message.Message{Role: message.RoleAssistant, Content: message.BlocksOf(message.Text(tok(200))),
		StopReason: message.StopStop, Usage: &message.Usage{TotalTokens: 5000}})
	h.user(tok(30))
	p, err := Prepare(h.entries, Settings{KeepRecentTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	if p.TokensBefore != 5030 {
		t.Errorf("TokensBefore = %d, want 5030 (usage + the message after it)", p.TokensBefore)
	}
}

func TestPrepareSettings(t *testing.T) {
	t.Parallel()
	if _, err := Prepare(nil, Settings{ReserveTokens: -1}); err == nil {
		t.Error("negative ReserveTokens accepted")
	}
	var h hist
	h.user(tok(30000))
	h.asst(tok(10))
	h.user(tok(25000))
	p, err := Prepare(h.entries, Settings{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Settings.ReserveTokens != ReserveTokensDefault || p.Settings.KeepRecentTokens != KeepRecentTokensDefault {
		t.Errorf("defaults not applied: %+v", p.Settings)
	}
}
