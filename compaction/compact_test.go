package compaction

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/scripted"
	"github.com/lanefleet/lanefleet/sessionfile"
)

var testModel = provider.Model{ID: "claude-sonnet-4-6", Provider: "anthropic", API: "anthropic-messages",
	ContextWindow: 200000, MaxTokens: 64000, Reasoning: true}

var testNow = time.Date(2026, 3, 15, 11, 0, 0, 0, time.UTC)

const (
	historyReply = "## Goal\nAdd --verbose to cmd/tool."
	prefixReply  = "## Original Request\nDocument --verbose in README.md."
)

// fakeLLM records the requests it gets and answers with reply.
type fakeLLM struct {
	mu    sync.Mutex
	reqs  []provider.Request
	reply func(ctx context.Context, req *provider.Request) (message.Message, error)
}

func (f *fakeLLM) Stream(ctx context.Context, req *provider.Request, emit func(provider.Event)) (message.Message, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, *req)
	f.mu.Unlock()
	return f.reply(ctx, req)
}

func (f *fakeLLM) requests() []provider.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs)
}

func isPrefixRequest(req *provider.Request) bool {
	return strings.Contains(req.Messages[0].Content.Text(), "PREFIX of a turn")
}

func assistant(text string, usage message.Usage) message.Message {
	return message.Message{Role: message.RoleAssistant, Content: message.BlocksOf(message.Text(text)),
		StopReason: message.StopStop, Usage: &usage}
}

// summarizer answers the history and the prefix request with fixed texts.
func summarizer(ctx context.Context, req *provider.Request) (message.Message, error) {
	if isPrefixRequest(req) {
		return assistant(prefixReply, message.Usage{Input: 500, Output: 50, TotalTokens: 550}), nil
	}
	return assistant(historyReply, message.Usage{Input: 1000, Output: 100, TotalTokens: 1100}), nil
}

type bundle struct {
	llm *fakeLLM
	req Request
}

func setup(t *testing.T) *bundle {
	t.Helper()
	llm := &fakeLLM{reply: summarizer}
	return &bundle{llm: llm, req: Request{
		Provider: llm, Model: testModel, APIKey: "sk-test", Entries: readFixture(t),
		Settings: Settings{KeepRecentTokens: 100}, Trigger: TriggerThreshold, Now: testNow,
	}}
}

// dumpRequests renders requests for a golden file, the history request
// (the larger maxTokens) first.
func dumpRequests(reqs []provider.Request) string {
	slices.SortFunc(reqs, func(a, b provider.Request) int { return cmp.Compare(b.MaxTokens, a.MaxTokens) })
	var b strings.Builder
	for i, r := range reqs {
		fmt.Fprintf(&b, "==== request %d: model %s, thinking %s, maxTokens %d, %d message(s)\n", i+1, r.Model.ID, r.Thinking, r.MaxTokens, len(r.Messages))
		fmt.Fprintf(&b, "---- system\n%s\n", r.SystemPrompt)
		for _, m := range r.Messages {
			fmt.Fprintf(&b, "---- %s\n%s\n", m.Role, m.Content.Text())
		}
	}
	return b.String()
}

// dumpEntry renders a compaction entry for a golden file, its random id
// masked.
func dumpEntry(e message.Entry) string {
	details, _ := json.Marshal(e.Fields["details"])
	return fmt.Sprintf("type: %s\nid: %s\nparentId: %s\ntimestamp: %s\nfirstKeptEntryId: %v\ntokensBefore: %v\nfromHook: %v\ndetails: %s\nsummary:\n%s\n",
		e.Type, regexp.MustCompile(`^[0-9a-f]{8}$`).ReplaceAllString(e.ID, "<8 hex>"), *e.ParentID, e.Timestamp,
		e.Fields["firstKeptEntryId"], e.Fields["tokensBefore"], e.Fields["fromHook"], details, e.Fields["summary"])
}

// checkRoundTrip appends the result's entry, writes the session and reads
// it back: both ways the context is the summary, then the kept entries.
func checkRoundTrip(t *testing.T, entries []message.Entry, res *Result) {
	t.Helper()
	all := append(slices.Clip(entries), res.Entry)
	branch := sessionfile.Branch(withoutHeaders(all))
	i := slices.IndexFunc(branch, func(e message.Entry) bool { return e.ID == res.FirstKeptEntryID })
	if i < 0 {
		t.Fatalf("first kept entry %s not on the branch", res.FirstKeptEntryID)
	}
	want := entryMessages(branch[i : len(branch)-1])
	lines := all
	if !lines[0].IsHeader() {
		lines = slices.Insert(slices.Clone(all), 0, message.Entry{Type: message.EntrySession, ID: "0c9d5f2e-1111-4222-8333-944445555666", Version: 3})
	}
	var buf bytes.Buffer
	if err := sessionfile.WriteEntries(&buf, lines); err != nil {
		t.Fatal(err)
	}
	back, err := sessionfile.ReadEntries(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for name, e := range map[string][]message.Entry{"in memory": all, "read back": back} {
		got := sessionfile.Messages(e)
		if len(got) == 0 || got[0].Role != sessionfile.RoleCompactionSummary || got[0].Extra["summary"] != res.Summary {
			t.Fatalf("%s: context does not start with the summary: %+v", name, got[:min(1, len(got))])
		}
		if len(got)-1 != len(want) {
			t.Fatalf("%s: %d messages kept, want %d", name, len(got)-1, len(want))
		}
		for k := range want {
			g, w := got[k+1], want[k]
			if g.Role != w.Role || g.Content.Text() != w.Content.Text() || g.ToolCallID != w.ToolCallID {
				t.Errorf("%s: kept message %d = %s %q, want %s %q", name, k, g.Role, g.Content.Text(), w.Role, w.Content.Text())
			}
		}
	}
}

// withPreviousCompaction returns the fixture with a compaction after the
// first answer (entry a000000c) that kept from the bash call (a0000008).
func withPreviousCompaction(t *testing.T) []message.Entry {
	entries := slices.Clone(readFixture(t))
	parent := "a000000c"
	c := message.Entry{Type: message.EntryCompaction, ID: "c0mpac71", ParentID: &parent, Timestamp: "2026-03-15T10:20:12.500Z",
		Fields: map[string]any{"summary": "## Goal\nAdd a --verbose flag.\n\n<modified-files>\ncmd/tool/main.go\n</modified-files>",
			"firstKeptEntryId": "a0000008", "tokensBefore": int64(5200), "fromHook": false,
			"details": map[string]any{"readFiles": []any{}, "modifiedFiles": []any{"cmd/tool/main.go"}}}}
	i := slices.IndexFunc(entries, func(e message.Entry) bool { return e.ID == parent })
	next := entries[i+1].Clone()
	next.ParentID = &c.ID
	entries[i+1] = next
	return slices.Insert(entries, i+1, c)
}

func TestCompactGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		keep       int
		entries    func(t *testing.T) []message.Entry
		focus      string
		firstKept  string
		requests   int
		read, mod  []string
		wantSuffix string
	}{
		{
			// The cut at the second user prompt moves back over the
			// custom_message before it.
			name: "initial", keep: 100, firstKept: "a000000e", requests: 1,
			mod: []string{"cmd/tool/main.go", "cmd/tool/main_test.go"},
		},
		{
			// The cut inside the README turn splits it.
			name: "split", keep: 60, firstKept: "a0000012", requests: 2,
			read: []string{"README.md"}, mod: []string{"cmd/tool/main.go", "cmd/tool/main_test.go"},
		},
		{
			// The previous summary is updated, with a focus.
			name: "update", keep: 100, entries: withPreviousCompaction, focus: "the README work",
			firstKept: "a000000e", requests: 1,
			mod: []string{"cmd/tool/main.go", "cmd/tool/main_test.go"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			if tt.entries != nil {
				b.req.Entries = tt.entries(t)
			}
			b.req.Settings.KeepRecentTokens = tt.keep
			b.req.CustomInstructions = tt.focus
			res, err := Compact(t.Context(), b.req)
			if err != nil {
				t.Fatal(err)
			}
			reqs := b.llm.requests()
			if len(reqs) != tt.requests {
				t.Fatalf("%d requests, want %d", len(reqs), tt.requests)
			}
			golden(t, "request-"+tt.name+".golden", dumpRequests(reqs))
			golden(t, "entry-"+tt.name+".golden", dumpEntry(res.Entry))

			if res.FirstKeptEntryID != tt.firstKept || res.Entry.Fields["firstKeptEntryId"] != tt.firstKept {
				t.Errorf("first kept %s, want %s", res.FirstKeptEntryID, tt.firstKept)
			}
			if !slices.Equal(res.ReadFiles, tt.read) || !slices.Equal(res.ModifiedFiles, tt.mod) {
				t.Errorf("files read %v modified %v, want %v %v", res.ReadFiles, res.ModifiedFiles, tt.read, tt.mod)
			}
			leaf := b.req.Entries[len(b.req.Entries)-1].ID
			if e := res.Entry; e.Type != message.EntryCompaction || *e.ParentID != leaf ||
				!regexp.MustCompile(`^[0-9a-f]{8}$`).MatchString(e.ID) || e.Timestamp != "2026-03-15T11:00:00.000Z" ||
				e.Fields["summary"] != res.Summary || e.Fields["tokensBefore"] != int64(res.TokensBefore) {
				t.Errorf("entry %+v", e)
			}
			if res.TokensBefore != 6500 || res.TokensAfter <= 0 || res.TokensAfter >= res.TokensBefore {
				t.Errorf("tokens before %d after %d", res.TokensBefore, res.TokensAfter)
			}
			if want := map[int]int64{1: 1100, 2: 1650}[tt.requests]; res.Usage.TotalTokens != want {
				t.Errorf("usage %+v", res.Usage)
			}
			if res.Trigger != TriggerThreshold {
				t.Errorf("trigger %q", res.Trigger)
			}
			checkRoundTrip(t, b.req.Entries, res)
		})
	}
}

func TestCompactRequestOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                  string
		model                 provider.Model
		reserve               int
		thinking              provider.ThinkingLevel
		historyMax, prefixMax int
	}{
		// floor(0.8 × 16384) and 0.5 × 16384.
		{"reasoning model", testModel, 0, provider.ThinkingHigh, 13107, 8192},
		{"no reasoning", provider.Model{ID: "gpt-4o", MaxTokens: 16384}, 0, provider.ThinkingOff, 13107, 8192},
		{"custom reserve", testModel, 10001, provider.ThinkingHigh, 8000, 5000},
		// Never more than the model can write.
		{"capped by the model", provider.Model{ID: "small", MaxTokens: 4096}, 0, provider.ThinkingOff, 4096, 4096},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.req.Model = tt.model
			b.req.Settings = Settings{ReserveTokens: tt.reserve, KeepRecentTokens: 60} // a split turn
			if _, err := Compact(t.Context(), b.req); err != nil {
				t.Fatal(err)
			}
			for _, r := range b.llm.requests() {
				want := tt.historyMax
				if isPrefixRequest(&r) {
					want = tt.prefixMax
				}
				if r.MaxTokens != want || r.Thinking != tt.thinking || r.APIKey.Reveal() != "sk-test" || r.Model.ID != tt.model.ID {
					t.Errorf("prefix=%v: maxTokens %d thinking %q key %q model %s; want %d %q", isPrefixRequest(&r),
						r.MaxTokens, r.Thinking, r.APIKey.Reveal(), r.Model.ID, want, tt.thinking)
				}
				if r.SystemPrompt != systemPrompt || len(r.Messages) != 1 || r.Messages[0].Timestamp != testNow.UnixMilli() {
					t.Errorf("request %+v", r)
				}
			}
		})
	}
}

// TestCompactSplitTurnConcurrent: the two requests of a split turn are in
// flight together (each waits for the other to arrive).
func TestCompactSplitTurnConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.req.Settings.KeepRecentTokens = 60
	var arrived sync.WaitGroup
	arrived.Add(2)
	both := make(chan struct{})
	go func() { arrived.Wait(); close(both) }()
	b.llm.reply = func(ctx context.Context, req *provider.Request) (message.Message, error) {
		arrived.Done()
		select {
		case <-both:
		case <-ctx.Done():
			return message.Message{}, ctx.Err()
		}
		return summarizer(ctx, req)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	res, err := Compact(ctx, b.req)
	if err != nil {
		t.Fatal(err)
	}
	if want := historyReply + "\n\n---\n\n**Turn Context (split turn):**\n\n" + prefixReply; !strings.HasPrefix(res.Summary, want+"\n\n<read-files>") {
		t.Errorf("summary %q", res.Summary)
	}
}

// TestCompactSplitTurnKeepsPreviousSummary: when nothing precedes the
// split turn but the previous compaction, its summary stands for the
// history (pi would write "No prior history.").
func TestCompactSplitTurnKeepsPreviousSummary(t *testing.T) {
	t.Parallel()
	var h hist
	h.user(tok(10))
	first := h.user(tok(300))
	h.compaction("PREVIOUS", first, nil)
	h.asst("", call("c1", "read", map[string]any{"path": "x.go"}))
	h.result("c1", "read", tok(300))
	h.asst(tok(10))
	llm := &fakeLLM{reply: summarizer}
	res, err := Compact(t.Context(), Request{Provider: llm, Model: testModel, Entries: h.entries, Settings: Settings{KeepRecentTokens: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if reqs := llm.requests(); len(reqs) != 1 || !isPrefixRequest(&reqs[0]) {
		t.Fatalf("requests %v", dumpRequests(reqs))
	}
	want := "PREVIOUS\n\n---\n\n**Turn Context (split turn):**\n\n" + prefixReply + "\n\n<read-files>\nx.go\n</read-files>"
	if res.Summary != want || res.FirstKeptEntryID != "e06" || res.Trigger != TriggerManual {
		t.Errorf("summary %q first kept %s trigger %s", res.Summary, res.FirstKeptEntryID, res.Trigger)
	}
	checkRoundTrip(t, h.entries, res)
}

func TestCompactErrors(t *testing.T) {
	t.Parallel()
	rateLimited := &provider.Error{Reason: provider.ReasonRateLimit, Status: 429, Message: "slow down"}
	overloaded := &provider.Error{Reason: provider.ReasonOverloaded, Status: 529, Message: "overloaded"}
	tests := []struct {
		name   string
		keep   int
		modify func(r *Request)
		reply  func(ctx context.Context, req *provider.Request) (message.Message, error)
		is     error
		reason provider.Reason
		text   string
		calls  int
	}{
		{
			name: "provider error",
			reply: func(context.Context, *provider.Request) (message.Message, error) {
				return message.Message{Role: message.RoleAssistant, StopReason: message.StopError, ErrorMessage: "slow down"}, rateLimited
			},
			is: rateLimited, reason: provider.ReasonRateLimit, text: "compaction: summarization failed: provider: rate_limit (HTTP 429): slow down", calls: 1,
		},
		{
			// A failure reported only in the message is an error too.
			name: "error stop without error",
			reply: func(context.Context, *provider.Request) (message.Message, error) {
				return message.Message{Role: message.RoleAssistant, StopReason: message.StopError, ErrorMessage: "prompt is too long"}, nil
			},
			reason: provider.ReasonUnknown, text: "summarization failed: provider: unknown: prompt is too long", calls: 1,
		},
		{
			name: "empty summary",
			reply: func(context.Context, *provider.Request) (message.Message, error) {
				return message.Message{Role: message.RoleAssistant, StopReason: message.StopLength,
					Content: message.BlocksOf(message.Thinking("all thought, no text", ""))}, nil
			},
			is: ErrEmptySummary, calls: 1,
		},
		{
			name: "blank summary",
			reply: func(context.Context, *provider.Request) (message.Message, error) {
				return assistant(" \n\t", message.Usage{}), nil
			},
			is: ErrEmptySummary, calls: 1,
		},
		{
			// The prefix request fails; the history request, cancelled by
			// it, does not hide the cause.
			name: "split turn: prefix fails", keep: 60,
			reply: func(ctx context.Context, req *provider.Request) (message.Message, error) {
				if isPrefixRequest(req) {
					return message.Message{}, overloaded
				}
				<-ctx.Done()
				return message.Message{}, ctx.Err()
			},
			is: overloaded, reason: provider.ReasonOverloaded, text: "compaction: turn prefix summarization failed", calls: 2,
		},
		{
			name: "split turn: empty prefix summary", keep: 60,
			reply: func(ctx context.Context, req *provider.Request) (message.Message, error) {
				if isPrefixRequest(req) {
					return assistant("", message.Usage{}), nil
				}
				return summarizer(ctx, req)
			},
			is: ErrEmptySummary, text: "turn prefix summarization", calls: 2,
		},
		{
			name: "already compacted",
			modify: func(r *Request) {
				leaf := r.Entries[len(r.Entries)-1].ID
				r.Entries = append(r.Entries, message.Entry{Type: message.EntryCompaction, ID: "c1", ParentID: &leaf,
					Fields: map[string]any{"summary": "s", "firstKeptEntryId": leaf}})
			},
			is: ErrAlreadyCompacted,
		},
		{
			name:   "nothing to compact",
			modify: func(r *Request) { r.Settings.KeepRecentTokens = 1 << 20 },
			is:     ErrNothingToCompact,
		},
		{name: "no provider", modify: func(r *Request) { r.Provider = nil }, text: "Provider is nil"},
		{name: "unknown trigger", modify: func(r *Request) { r.Trigger = "sometimes" }, text: `unknown trigger "sometimes"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			if tt.keep != 0 {
				b.req.Settings.KeepRecentTokens = tt.keep
			}
			if tt.reply != nil {
				b.llm.reply = tt.reply
			}
			if tt.modify != nil {
				tt.modify(&b.req)
			}
			res, err := Compact(t.Context(), b.req)
			if err == nil {
				t.Fatalf("no error, result %+v", res)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("err = %v, want %v", err, tt.is)
			}
			if tt.reason != "" && provider.ReasonOf(err) != tt.reason {
				t.Errorf("ReasonOf(%v) = %s, want %s", err, provider.ReasonOf(err), tt.reason)
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Errorf("err = %q, want it to contain %q", err, tt.text)
			}
			if n := len(b.llm.requests()); n != tt.calls {
				t.Errorf("%d provider calls, want %d", n, tt.calls)
			}
		})
	}
}

var errShutdown = errors.New("worker shutting down")

func TestCompactContext(t *testing.T) {
	t.Parallel()
	t.Run("cancelled while summarising", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		started := make(chan struct{})
		b.llm.reply = func(ctx context.Context, req *provider.Request) (message.Message, error) {
			close(started)
			<-ctx.Done()
			return message.Message{Role: message.RoleAssistant, StopReason: message.StopAborted, ErrorMessage: "aborted"}, ctx.Err()
		}
		ctx, cancel := context.WithCancelCause(t.Context())
		go func() {
			<-started
			cancel(errShutdown)
		}()
		_, err := Compact(ctx, b.req)
		if !errors.Is(err, context.Canceled) || provider.ReasonOf(err) != provider.ReasonAborted {
			t.Errorf("err = %v (reason %s), want context.Canceled", err, provider.ReasonOf(err))
		}
	})
	t.Run("provider ignores cancellation", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx, cancel := context.WithCancelCause(t.Context())
		b.llm.reply = func(_ context.Context, req *provider.Request) (message.Message, error) {
			cancel(errShutdown)
			return summarizer(ctx, req)
		}
		_, err := Compact(ctx, b.req)
		if !errors.Is(err, context.Canceled) || !errors.Is(err, errShutdown) {
			t.Errorf("err = %v, want context.Canceled and its cause", err)
		}
	})
	t.Run("cancelled before", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx, cancel := context.WithCancelCause(t.Context())
		cancel(errShutdown)
		_, err := Compact(ctx, b.req)
		if !errors.Is(err, context.Canceled) || !errors.Is(err, errShutdown) || len(b.llm.requests()) != 0 {
			t.Errorf("err = %v after %d calls", err, len(b.llm.requests()))
		}
	})
	t.Run("deadline", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.req.Settings.KeepRecentTokens = 60 // both requests wait
		b.llm.reply = func(ctx context.Context, req *provider.Request) (message.Message, error) {
			<-ctx.Done()
			return message.Message{}, ctx.Err()
		}
		ctx, cancel := context.WithDeadline(t.Context(), time.Now()) // already expired
		defer cancel()
		_, err := Compact(ctx, b.req)
		if provider.ReasonOf(err) != provider.ReasonTimeout {
			t.Errorf("err = %v (reason %s), want a timeout", err, provider.ReasonOf(err))
		}
	})
}

// TestCompactTokensAfterDropped: an estimate after the compaction larger
// than the usage-based estimate before is meaningless and dropped.
func TestCompactTokensAfterDropped(t *testing.T) {
	t.Parallel()
	var h hist
	h.user(tok(2000))
	h.msg(message.Message{Role: message.RoleAssistant, Content: message.BlocksOf(message.Text(tok(10))),
		StopReason: message.StopStop, Usage: &message.Usage{TotalTokens: 5}, Timestamp: 1773570000000})
	h.user(tok(300))
	res, err := Compact(t.Context(), Request{Provider: &fakeLLM{reply: summarizer}, Model: testModel, Entries: h.entries,
		Settings: Settings{KeepRecentTokens: 100}, Now: testNow})
	if err != nil {
		t.Fatal(err)
	}
	// After: the summary and the 300 tokens kept, more than 5 + 300.
	if res.TokensBefore != 305 || res.TokensAfter != 0 {
		t.Errorf("before %d after %d, want 305 and 0", res.TokensBefore, res.TokensAfter)
	}
}

// TestCompactScripted runs against the built-in scripted provider.
func TestCompactScripted(t *testing.T) {
	t.Parallel()
	p := scripted.New(scripted.Config{Scripts: map[string]scripted.Script{
		"summarizer": {Replies: []scripted.Reply{{Text: historyReply, Chunks: 3}}},
	}})
	entries := readFixture(t)
	res, err := Compact(t.Context(), Request{Provider: p, Model: scripted.Model("summarizer"), Entries: entries,
		Settings: Settings{KeepRecentTokens: 100}, Trigger: TriggerOverflow, Now: testNow})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Summary, historyReply+"\n\n<modified-files>\n") || res.Trigger != TriggerOverflow {
		t.Errorf("summary %q trigger %s", res.Summary, res.Trigger)
	}
	checkRoundTrip(t, entries, res)
}

func TestFunc(t *testing.T) {
	t.Parallel()
	// The run loop declares its own one-method interface.
	var c interface {
		Compact(context.Context, Request) (*Result, error)
	} = Func(func(context.Context, Request) (*Result, error) { return &Result{Summary: "s"}, nil })
	if res, err := c.Compact(t.Context(), Request{}); err != nil || res.Summary != "s" {
		t.Errorf("%v %v", res, err)
	}
}
