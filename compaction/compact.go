package compaction

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/sessionfile"
)

// ErrEmptySummary: the model answered the summary request without text.
var ErrEmptySummary = errors.New("compaction: the model returned an empty summary")

// Trigger is why a compaction runs.
type Trigger string

// Triggers.
const (
	// TriggerOverflow: the provider refused the context as too long.
	TriggerOverflow Trigger = "overflow"
	// TriggerThreshold: ShouldCompact after a run.
	TriggerThreshold Trigger = "threshold"
	// TriggerManual: asked for (/compact).
	TriggerManual Trigger = "manual"
)

// Request is one compaction.
type Request struct {
	// Provider and Model make the summary requests: the session's current
	// model. APIKey is passed on unchanged.
	Provider provider.Provider
	Model    provider.Model
	APIKey   provider.Secret
	// Entries are the session's entries in file order (a header line is
	// ignored); the current branch ends at the last one.
	Entries []message.Entry
	// Settings; zero fields take pi's defaults. Enabled is not consulted.
	Settings Settings
	// CustomInstructions, when set, are appended to the summary prompt as
	// "Additional focus: …" (/compact <focus>).
	CustomInstructions string
	// Trigger is reported back in the Result; empty means TriggerManual.
	Trigger Trigger
	// Now stamps the entry and the request; zero means time.Now().
	Now time.Time
}

// Result is a finished compaction.
type Result struct {
	// Entry is the pi "compaction" entry to append after the current leaf:
	// a fresh id, parentId = the leaf, and the fields summary,
	// firstKeptEntryId, tokensBefore, details {readFiles, modifiedFiles}
	// and fromHook (false).
	Entry message.Entry
	// Summary is the entry's summary: the model's summary followed by the
	// file lists.
	Summary string
	// FirstKeptEntryID is the first entry the context keeps after Entry's
	// summary.
	FirstKeptEntryID string
	// TokensBefore estimates the context before the compaction.
	TokensBefore int
	// TokensAfter estimates the context once Entry is appended; 0 when the
	// estimate came out larger than TokensBefore (it is then meaningless),
	// as OpenClaw drops it.
	TokensAfter int
	// ReadFiles and ModifiedFiles are the entry's details.
	ReadFiles, ModifiedFiles []string
	// Trigger is the request's trigger.
	Trigger Trigger
	// Usage is the summed usage of the summary requests.
	Usage message.Usage
}

// Func adapts a function (Compact, or a stand-in) to the one-method
// interface a caller declares, such as the run loop's compactor.
type Func func(ctx context.Context, req Request) (*Result, error)

// Compact calls f.
func (f Func) Compact(ctx context.Context, req Request) (*Result, error) { return f(ctx, req) }

// Compact summarises the older history of req.Entries with req.Model and
// returns the compaction entry to append, as pi's compact does:
//
//   - Prepare chooses the first kept entry and the messages to summarise;
//   - one request (system prompt: summariser; user: the Serialize'd
//     messages, the previous summary in <previous-summary> tags if any, and
//     pi's checkpoint or update prompt) gets maxTokens = 80% of
//     ReserveTokens;
//   - for a split turn a second request, run at the same time, summarises
//     the turn's prefix with 50% of ReserveTokens, and the two are joined
//     under a "Turn Context (split turn)" heading;
//   - the read and modified files are appended in <read-files> and
//     <modified-files> tags.
//
// Both requests use thinking level high on reasoning models and off
// otherwise; maxTokens is capped at the model's MaxTokens.
//
// Errors: those of Prepare (ErrAlreadyCompacted, ErrNothingToCompact,
// ErrNoEntryID); a provider failure, wrapped (%w) after "compaction:
// summarization failed:" or "compaction: turn prefix summarization
// failed:", so provider.ReasonOf classifies it; ErrEmptySummary; and
// ctx's error once ctx is done.
func Compact(ctx context.Context, req Request) (*Result, error) {
	if req.Provider == nil {
		return nil, errors.New("compaction: Request.Provider is nil")
	}
	switch req.Trigger {
	case "":
		req.Trigger = TriggerManual
	case TriggerOverflow, TriggerThreshold, TriggerManual:
	default:
		return nil, fmt.Errorf("compaction: unknown trigger %q", req.Trigger)
	}
	if req.Now.IsZero() {
		req.Now = time.Now()
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("compaction: %w", ctxErr(ctx))
	}
	p, err := Prepare(req.Entries, req.Settings)
	if err != nil {
		return nil, err
	}
	summary, usage, err := summarize(ctx, &req, p)
	if err != nil {
		return nil, err
	}
	summary += fileListsText(p.ReadFiles, p.ModifiedFiles)

	leaf := p.LeafID
	entry := message.Entry{
		Type:      message.EntryCompaction,
		ID:        newEntryID(req.Entries),
		ParentID:  &leaf,
		Timestamp: req.Now.UTC().Format("2006-01-02T15:04:05.000Z"),
		Fields: map[string]any{
			"summary":          summary,
			"firstKeptEntryId": p.FirstKeptEntryID,
			"tokensBefore":     int64(p.TokensBefore),
			"details": map[string]any{
				"readFiles":     anyList(p.ReadFiles),
				"modifiedFiles": anyList(p.ModifiedFiles),
			},
			"fromHook": false,
		},
	}
	after := ContextTokens(sessionfile.Messages(append(slices.Clip(req.Entries), entry)))
	if after > p.TokensBefore {
		after = 0
	}
	return &Result{
		Entry:            entry,
		Summary:          summary,
		FirstKeptEntryID: p.FirstKeptEntryID,
		TokensBefore:     p.TokensBefore,
		TokensAfter:      after,
		ReadFiles:        p.ReadFiles,
		ModifiedFiles:    p.ModifiedFiles,
		Trigger:          req.Trigger,
		Usage:            usage,
	}, nil
}

// summarize makes the history summary and, for a split turn, the prefix
// summary concurrently, and joins them.
func summarize(ctx context.Context, req *Request, p *Preparation) (string, message.Usage, error) {
	reserve := p.Settings.ReserveTokens
	history := func(ctx context.Context) outcome {
		return complete(ctx, req, "summarization",
			summaryPromptText(p.MessagesToSummarize, p.PreviousSummary, req.CustomInstructions), reserve*4/5)
	}
	if !p.IsSplitTurn {
		c := history(ctx)
		return c.text, c.usage, c.err
	}
	prefix := func(ctx context.Context) outcome {
		return complete(ctx, req, "turn prefix summarization", turnPrefixPromptText(p.TurnPrefixMessages), reserve/2)
	}
	if len(p.MessagesToSummarize) == 0 {
		// Nothing before the turn: pi writes "No prior history.", which would
		// lose a previous summary; keep that instead.
		history = func(context.Context) outcome {
			if p.PreviousSummary != "" {
				return outcome{text: p.PreviousSummary}
			}
			return outcome{text: noPriorHistory}
		}
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var calls [2]outcome
	var wg sync.WaitGroup
	for i, f := range []func(context.Context) outcome{history, prefix} {
		wg.Go(func() {
			calls[i] = f(ctx)
			if calls[i].err != nil {
				cancel(calls[i].err) // the other request is wasted now
			}
		})
	}
	wg.Wait()
	if calls[0].err != nil || calls[1].err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
			return "", message.Usage{}, cause // the first failure, not the sibling it cancelled
		}
		if calls[0].err != nil {
			return "", message.Usage{}, calls[0].err
		}
		return "", message.Usage{}, calls[1].err
	}
	return joinSplitTurn(calls[0].text, calls[1].text), calls[0].usage.Add(calls[1].usage), nil
}

// outcome is what one summary request gave.
type outcome struct {
	text  string
	usage message.Usage
	err   error
}

// complete makes one summary request and returns its text.
func complete(ctx context.Context, req *Request, what, prompt string, maxTokens int) outcome {
	if req.Model.MaxTokens > 0 && maxTokens > req.Model.MaxTokens {
		maxTokens = req.Model.MaxTokens
	}
	thinking := provider.ThinkingOff
	if req.Model.Reasoning {
		thinking = provider.ThinkingHigh
	}
	r := &provider.Request{
		Model:        req.Model,
		SystemPrompt: systemPrompt,
		Messages: []message.Message{{
			Role:      message.RoleUser,
			Content:   message.BlocksOf(message.Text(prompt)),
			Timestamp: req.Now.UnixMilli(),
		}},
		Thinking:  thinking,
		MaxTokens: maxTokens,
		APIKey:    req.APIKey,
	}
	m, err := req.Provider.Stream(ctx, r, func(provider.Event) {})
	var c outcome
	if m.Usage != nil {
		c.usage = *m.Usage
	}
	switch {
	case err != nil:
	case ctx.Err() != nil:
		err = ctxErr(ctx)
	case m.StopReason == message.StopError || m.StopReason == message.StopAborted:
		// A provider that reports the failure only in the message.
		msg := m.ErrorMessage
		if msg == "" {
			msg = "unknown error"
		}
		err = &provider.Error{Reason: provider.ReasonUnknown, Message: msg}
	}
	if err != nil {
		c.err = fmt.Errorf("compaction: %s failed: %w", what, err)
		return c
	}
	var parts []string
	for _, b := range m.Content.Blocks {
		if b.Type == message.BlockText {
			parts = append(parts, b.Text)
		}
	}
	c.text = strings.Join(parts, "\n")
	if strings.TrimSpace(c.text) == "" {
		c.err = fmt.Errorf("%w (%s, stop reason %q)", ErrEmptySummary, what, m.StopReason)
	}
	return c
}

// ctxErr is ctx's error together with its cause, when the cause is
// another error (a shutdown), so that errors.Is finds either.
func ctxErr(ctx context.Context) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause == nil || errors.Is(cause, err) {
		return err
	}
	return fmt.Errorf("%w: %w", err, cause)
}

// newEntryID returns an entry id not used in entries, as pi's generateId:
// 8 hex digits, a full UUID after repeated collisions.
func newEntryID(entries []message.Entry) string {
	used := make(map[string]bool, len(entries))
	for i := range entries {
		used[entries[i].ID] = true
	}
	for range 100 {
		if id := sessionfile.NewEntryID(); !used[id] {
			return id
		}
	}
	return sessionfile.NewSessionID()
}

func anyList(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
