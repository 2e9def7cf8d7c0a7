package runner

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/guard"
	"github.com/lanefleet/lanefleet/internal/conformance"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/sanitize"
)

// The run-loop.json vocabulary (testdata/conformance/README.md): the
// harness plays every input key and checks every expectation key it
// lists, and fails on any other.

// scenario is a run-loop.json case's input.
type scenario struct {
	Profiles           []string                `json:"profiles"`
	LockedProfile      string                  `json:"lockedProfile"`
	ProfileStats       map[string]profileStats `json:"profileStats"`
	ProfileCounts      []int                   `json:"profileCounts"`
	FallbackConfigured bool                    `json:"fallbackConfigured"`
	Provider           string                  `json:"provider"`
	Model              string                  `json:"model"`
	// Resolvable false: the model cannot be resolved.
	Resolvable *bool `json:"resolvable"`
	// ModelContextWindow is the resolved model's window.
	ModelContextWindow  *float64 `json:"modelContextWindow"`
	ContextWindowTokens float64  `json:"contextWindowTokens"`
	ThinkLevel          string   `json:"thinkLevel"`
	// Prompt is the user text as sent, before any scrubbing.
	Prompt *string `json:"prompt"`
	// Attempts are the attempts in order, or prose the harness cannot
	// play (such a case belongs in DEVIATIONS).
	Attempts          json.RawMessage `json:"attempts"`
	CompactOutcomes   []bool          `json:"compactOutcomes"`
	TruncationOutcome *struct {
		Truncated bool `json:"truncated"`
		Count     int  `json:"count"`
	} `json:"truncationOutcome"`
}

// profileStats is a profile's state before the run.
type profileStats struct {
	CooldownActive bool           `json:"cooldownActive"`
	DisabledActive bool           `json:"disabledActive"`
	DisabledReason string         `json:"disabledReason"`
	FailureCounts  map[string]int `json:"failureCounts"`
	// Absolute forms of the same (Unix ms), and the error count.
	CooldownUntil int64 `json:"cooldownUntil"`
	DisabledUntil int64 `json:"disabledUntil"`
	ErrorCount    int   `json:"errorCount"`
}

// scenarioAttempt is one attempt of a scenario.
type scenarioAttempt struct {
	OK                       bool            `json:"ok"`
	PromptError              string          `json:"promptError"`
	AssistantError           string          `json:"assistantError"`
	TimedOut                 bool            `json:"timedOut"`
	TimedOutDuringCompaction bool            `json:"timedOutDuringCompaction"`
	Aborted                  bool            `json:"aborted"`
	InAttemptCompactions     int             `json:"inAttemptCompactions"`
	AssistantTexts           []string        `json:"assistantTexts"`
	LastAssistant            json.RawMessage `json:"lastAssistant"`
	Payloads                 []struct {
		Text    string `json:"text"`
		IsError bool   `json:"isError"`
	} `json:"payloads"`
	// ClientToolCall is a call of a client (hosted) tool, which ends the
	// attempt.
	ClientToolCall *struct {
		Name   string         `json:"name"`
		Params map[string]any `json:"params"`
	} `json:"clientToolCall"`
	AttemptUsage         json.RawMessage `json:"attemptUsage"`
	LastAssistantUsage   json.RawMessage `json:"lastAssistantUsage"`
	SnapshotHasOversized bool            `json:"snapshotHasOversizedToolResult"`
}

// expectationKeys are the keys a run-loop case may expect.
var expectationKeys = []string{
	"result", "thrown", "attemptCount", "explicitCompactions", "overflowAttemptsUsed", "toolResultTruncation", "rotated",
	"maxIterations", "thinkLevels", "markedFailures", "markedGoodAndUsed", "finalProfile", "profileCooldownAfterRun",
	"payloads", "metaErrorKind", "metaAborted", "agentMetaCompactionCount", "promptSent", "meta",
}

// scenarioCallID is the id the scenarios' model gives a client tool call
// (they name none): the reference's shape, nine lowercase hex digits. The
// run passes the model's id through to the result's pending calls.
const scenarioCallID = "0a1b2c3d4"

// scriptedLoop plays a scenario's attempts, compactions and truncation, and
// records what the loop asked of it.
type scriptedLoop struct {
	t           *testing.T
	attempts    []scenarioAttempt
	compacts    []bool
	truncN      int
	window      int
	prompt      *string
	n           int
	explicit    int
	truncations int
	// profiles are the profiles the attempts ran with, in order;
	// promptSent is the prompt the last attempt sent.
	profiles   []string
	promptSent *string
}

// rotated reports whether the loop moved to another profile.
func (s *scriptedLoop) rotated() bool {
	for _, p := range s.profiles {
		if p != s.profiles[0] {
			return true
		}
	}
	return false
}

func (s *scriptedLoop) attempt(_ context.Context, req *attemptReq, out *attemptOut) {
	*out = s.play(req)
}

// play plays the next scripted attempt.
func (s *scriptedLoop) play(req *attemptReq) attemptOut {
	a := scenarioAttempt{OK: true}
	if s.n < len(s.attempts) {
		a = s.attempts[s.n]
	}
	s.profiles = append(s.profiles, req.profile)
	s.n++
	if s.prompt != nil {
		// What a request to this attempt's provider carries.
		sent := sanitize.ScrubRefusalTrigger(req.model.Provider, []message.Message{message.User(*s.prompt, 1)})[0].Content.Text()
		s.promptSent = &sent
	}
	out := attemptOut{aborted: a.Aborted, timedOut: a.TimedOut, timedOutDuringCompaction: a.TimedOutDuringCompaction,
		compactions: a.InAttemptCompactions, texts: a.AssistantTexts}
	for _, p := range a.Payloads {
		if p.IsError {
			s.t.Fatalf("attempt %d: an attempt's own error payload cannot be played", s.n)
		}
		if a.AssistantTexts == nil {
			out.texts = append(out.texts, p.Text)
		}
	}
	if a.PromptError != "" {
		out.promptErr = errors.New(a.PromptError)
	}
	var last *message.Message
	if len(a.LastAssistant) > 0 && string(a.LastAssistant) != "null" {
		// A message of the neutral model; its usage may use any of the
		// reference's field names.
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(a.LastAssistant, &fields); err != nil {
			s.t.Fatalf("attempt %d: lastAssistant: %v", s.n, err)
		}
		usage := fields["usage"]
		delete(fields, "usage")
		fields["role"] = json.RawMessage(`"assistant"`)
		raw, _ := json.Marshal(fields)
		last = &message.Message{}
		if err := json.Unmarshal(raw, last); err != nil {
			s.t.Fatalf("attempt %d: lastAssistant: %v", s.n, err)
		}
		if len(usage) > 0 {
			u, err := conformance.Usage(usage)
			if err != nil {
				s.t.Fatalf("attempt %d: lastAssistant.usage: %v", s.n, err)
			}
			last.Usage = &u
		}
	}
	switch {
	case a.AssistantError != "":
		if last == nil {
			last = &message.Message{Role: message.RoleAssistant}
		}
		last.StopReason, last.ErrorMessage = message.StopError, a.AssistantError
		out.lastErr = errors.New(a.AssistantError)
	case a.ClientToolCall != nil:
		// The model calls a client tool: the attempt stops with it
		// pending, as the run loop's attempt leaves such a call.
		call := message.ToolCall(scenarioCallID, a.ClientToolCall.Name, a.ClientToolCall.Params)
		if last == nil {
			last = &message.Message{Role: message.RoleAssistant, StopReason: message.StopToolUse}
		}
		last.Content.Blocks = append(last.Content.Blocks, call)
		out.pending = []events.PendingCall{pendingCall(call, false)}
	case a.OK && last == nil:
		last = &message.Message{Role: message.RoleAssistant, StopReason: message.StopStop, Content: message.BlocksOf(message.Text("ok"))}
		if out.texts == nil {
			out.texts = []string{"ok"}
		}
	}
	if last != nil && last.StopReason == message.StopError && out.lastErr == nil {
		out.lastErr = errors.New(last.ErrorMessage)
	}
	var err error
	if out.usage, err = conformance.Usage(a.AttemptUsage); err != nil {
		s.t.Fatalf("attempt %d: attemptUsage: %v", s.n, err)
	}
	if len(a.LastAssistantUsage) > 0 {
		u, err := conformance.Usage(a.LastAssistantUsage)
		if err != nil {
			s.t.Fatalf("attempt %d: lastAssistantUsage: %v", s.n, err)
		}
		if last == nil {
			s.t.Fatalf("attempt %d: lastAssistantUsage without a last assistant message", s.n)
		}
		last.Usage = &u
	}
	out.last = last
	if a.SnapshotHasOversized {
		big := strings.Repeat("x", guard.MaxToolResultChars(s.window)+1)
		out.snapshot = []message.Message{{Role: message.RoleToolResult, ToolCallID: "c1", Content: message.BlocksOf(message.Text(big))}}
	}
	return out
}

func (s *scriptedLoop) compact(context.Context, attemptReq, string) bool {
	s.explicit++
	if len(s.compacts) == 0 {
		return false
	}
	ok := s.compacts[0]
	s.compacts = s.compacts[1:]
	return ok
}

func (s *scriptedLoop) pause(context.Context, time.Duration, int, string) error { return nil }

func (s *scriptedLoop) truncate(context.Context, int) int {
	s.truncations++
	return s.truncN
}

// recordingAuth records what the loop marks.
type recordingAuth struct {
	*MemoryAuth
	mu       sync.Mutex
	failures []map[string]any
	good     []string
}

func (a *recordingAuth) Apply(ctx context.Context, id string, ev authprofile.Event) error {
	a.mu.Lock()
	if ev.Kind == authprofile.EventFailure {
		a.failures = append(a.failures, map[string]any{"profile": id, "reason": string(ev.Reason)})
	}
	a.mu.Unlock()
	return a.MemoryAuth.Apply(ctx, id, ev)
}

func (a *recordingAuth) MarkGood(ctx context.Context, prov, id string) error {
	a.mu.Lock()
	a.good = append(a.good, id)
	a.mu.Unlock()
	return a.MemoryAuth.MarkGood(ctx, prov, id)
}

func TestConformanceRunLoop(t *testing.T) {
	t.Parallel()
	conformance.Run(t, "run-loop", playScenario)
}

// TestRunLoopVocabulary plays cases of the run-loop.json format written
// for this package from runtime spec §3 (testdata/run-loop-vocabulary.json),
// for the keys of the format the shipped cases do not use: an unknown
// model, a window under the hard minimum, the refusal test string, a
// hosted client tool call, usage, the final profile.
func TestRunLoopVocabulary(t *testing.T) {
	t.Parallel()
	for _, c := range conformance.LoadFile(t, filepath.Join("testdata", "run-loop-vocabulary.json")) {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			playScenario(t, c)
		})
	}
}

// playScenario runs one run-loop case through the code the fleet runs for
// a model (setupModel, then runModel) with its attempts scripted.
func playScenario(t *testing.T, c conformance.Case) {
	now := time.UnixMilli(conformance.Now)
	var in scenario
	conformance.Strict(t, c.Input, &in)
	var exp map[string]any
	if err := json.Unmarshal(c.Expected, &exp); err != nil {
		t.Fatal(err)
	}
	conformance.Keys(t, "expected", exp, expectationKeys...)
	// Every expected key must be checked against what the loop did.
	checked := map[string]bool{}
	defer func() {
		for key := range exp {
			if !checked[key] {
				t.Errorf("expected %q is not checked by the harness", key)
			}
		}
	}()
	check := func(key string, got any) {
		t.Helper()
		want, ok := exp[key]
		if !ok {
			return
		}
		checked[key] = true
		if ok, diff := conformance.Equal(jsonValue(t, got), want); !ok {
			t.Errorf("%s: %s", key, diff)
		}
	}
	if len(in.ProfileCounts) > 0 {
		// The cap runModel gives the loop (TestRetryLimitReached
		// drives a loop into it).
		var got []any
		for _, n := range in.ProfileCounts {
			got = append(got, float64(IterationCap(n)))
		}
		check("maxIterations", got)
		return
	}

	sl := &scriptedLoop{t: t, compacts: in.CompactOutcomes, prompt: in.Prompt}
	for _, raw := range rawAttempts(t, in.Attempts) {
		var a scenarioAttempt
		conformance.Strict(t, raw, &a)
		sl.attempts = append(sl.attempts, a)
	}
	if in.TruncationOutcome != nil && in.TruncationOutcome.Truncated {
		sl.truncN = in.TruncationOutcome.Count
	}
	auth := &recordingAuth{MemoryAuth: NewMemoryAuth(scenarioStore(in, now), authprofile.Config{}, func() time.Time { return now })}

	// What the fleet runs for a model: its setup (§3.1 steps 2-3),
	// then its loop.
	ref := cmp.Or(in.Provider, "anthropic") + "/" + cmp.Or(in.Model, "claude-opus-4-6")
	res := scenarioResolver{unresolvable: in.Resolvable != nil && !*in.Resolvable}
	if in.ModelContextWindow != nil {
		res.window = int(*in.ModelContextWindow)
	}
	var out *loopOut
	m, _, w, err := setupModel(res, ref, guard.WindowConfig{AgentContextTokens: in.ContextWindowTokens})
	if err == nil {
		sl.window = w.Tokens
		out, err = runModel(t.Context(), loopReq{runID: "run-1", model: &m, contextWindow: w.Tokens,
			thinking: provider.ThinkingLevel(in.ThinkLevel), auth: auth, locked: in.LockedProfile,
			fallbackConfigured: in.FallbackConfigured, now: func() time.Time { return now }}, sl)
	}

	result := "success"
	switch {
	case err != nil:
		result = "throws"
	case out.runErr != nil || hasErrorPayload(out):
		result = "errorPayload"
	}
	check("result", result)
	check("attemptCount", sl.n)
	check("explicitCompactions", sl.explicit)
	check("toolResultTruncation", sl.truncations > 0)
	check("rotated", len(sl.profiles) > 0 && sl.rotated())
	failures := auth.failures
	if failures == nil {
		failures = []map[string]any{}
	}
	check("markedFailures", failures)
	var good any
	if len(auth.good) > 0 {
		good = auth.good[len(auth.good)-1]
	}
	check("markedGoodAndUsed", good)
	var final any
	if out != nil && out.finalProfile != "" {
		final = out.finalProfile
	}
	check("finalProfile", final)
	if _, ok := exp["profileCooldownAfterRun"]; ok {
		var cd any
		if len(in.Profiles) > 0 {
			if st := auth.State(in.Profiles[0]); st.CooldownUntil > 0 {
				cd = st.CooldownUntil
			}
		}
		check("profileCooldownAfterRun", cd)
	}
	if _, ok := exp["promptSent"]; ok && in.Prompt == nil {
		t.Fatal("promptSent is expected of a case without a prompt")
	}
	if sl.promptSent != nil {
		check("promptSent", *sl.promptSent)
	} else {
		check("promptSent", nil)
	}
	if out != nil {
		check("overflowAttemptsUsed", out.overflowTries)
		check("maxIterations", out.maxIter)
		check("thinkLevels", out.thinkLevels)
	}
	if out != nil && err == nil {
		r := out.result(m, "session-1", 0)
		var kind any
		if r.Meta.Error != nil {
			kind = r.Meta.Error.Kind
		}
		check("metaErrorKind", kind)
		checkOmitted(t, exp, checked, "metaAborted", r.Meta.Aborted, false)
		checkOmitted(t, exp, checked, "agentMetaCompactionCount", r.Meta.AgentMeta.CompactionCount, 0)
		payloads := r.Payloads
		if payloads == nil {
			payloads = []events.Payload{}
		}
		if want, ok := exp["payloads"]; ok && want == nil {
			// The reference omits payloads when there are none.
			checked["payloads"] = true
			if len(payloads) > 0 {
				t.Errorf("payloads: got %+v, want none", payloads)
			}
		} else {
			check("payloads", payloads)
		}
		if want, ok := exp["meta"]; ok {
			checked["meta"] = true
			if ok, diff := conformance.Subset(r.Meta, want); !ok {
				t.Errorf("meta: %s", diff)
			}
		}
	}
	if th, ok := exp["thrown"]; ok {
		checked["thrown"] = true
		checkThrown(t, err, th)
	}
	for _, key := range []string{"metaErrorKind", "metaAborted", "agentMetaCompactionCount", "payloads", "meta", "overflowAttemptsUsed", "maxIterations", "thinkLevels"} {
		if _, ok := exp[key]; ok && !checked[key] {
			t.Errorf("expected %q of a run that returned no result (%v)", key, err)
			checked[key] = true
		}
	}
}

// checkOmitted checks a result field the reference omits when it has its
// zero value: an expected null stands for zero.
func checkOmitted(t *testing.T, exp map[string]any, checked map[string]bool, key string, got, zero any) {
	t.Helper()
	want, ok := exp[key]
	if !ok {
		return
	}
	checked[key] = true
	if want == nil {
		want = zero
	}
	if ok, diff := conformance.Equal(got, jsonValue(t, want)); !ok {
		t.Errorf("%s: %s", key, diff)
	}
}

// checkThrown compares the error the loop threw with a case's thrown: a
// message, or {type, reason, status, message} where type FailoverError is
// a *provider.Error and Error any other error.
func checkThrown(t *testing.T, err error, th any) {
	t.Helper()
	if err == nil {
		t.Fatalf("nothing thrown, want %v", th)
	}
	switch th := th.(type) {
	case string:
		if err.Error() != th {
			t.Errorf("thrown %q, want %q", err.Error(), th)
		}
	case map[string]any:
		conformance.Keys(t, "thrown", th, "type", "reason", "status", "message")
		var pe *provider.Error
		isFailover := errors.As(err, &pe)
		if typ, ok := th["type"]; ok && (typ == "FailoverError") != isFailover {
			t.Errorf("thrown %T %v, want a %v", err, err, typ)
		}
		if m, ok := th["message"]; ok {
			msg := err.Error()
			if isFailover {
				msg = pe.Message
			}
			if msg != m {
				t.Errorf("thrown message %q, want %v", msg, m)
			}
		}
		if r, ok := th["reason"]; ok && (!isFailover || (r == nil) != (pe.Reason == "") || r != nil && string(pe.Reason) != r) {
			t.Errorf("thrown %T %v, want reason %v", err, err, r)
		}
		if s, ok := th["status"]; ok {
			got := 0
			if isFailover {
				got = pe.Status
			}
			if s == nil && got != 0 || s != nil && float64(got) != s {
				t.Errorf("thrown status %d, want %v", got, s)
			}
		}
	default:
		t.Fatalf("thrown %v: neither a message nor an object", th)
	}
}

// rawAttempts splits a case's attempts into their objects.
func rawAttempts(t *testing.T, raw json.RawMessage) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	if len(raw) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("attempts: %v (a scenario the harness cannot play belongs in DEVIATIONS)", err)
	}
	return out
}

// scenarioStore is the auth-profile store of a scenario at now: one
// Anthropic API key per profile, in the state its stats describe.
func scenarioStore(in scenario, now time.Time) authprofile.Store {
	store := authprofile.Store{Usage: map[string]authprofile.State{}}
	for _, id := range in.Profiles {
		store.Profiles = append(store.Profiles, authprofile.Profile{ID: id, Type: authprofile.TypeAPIKey, Provider: cmp.Or(in.Provider, "anthropic"), Key: "sk-" + provider.Secret(id)})
		ps := in.ProfileStats[id]
		st := authprofile.State{CooldownUntil: ps.CooldownUntil, DisabledUntil: ps.DisabledUntil, ErrorCount: ps.ErrorCount}
		if ps.CooldownActive {
			st.CooldownUntil = now.Add(time.Hour).UnixMilli()
		}
		if ps.DisabledActive || ps.DisabledReason != "" && st.DisabledUntil == 0 {
			st.DisabledUntil = now.Add(time.Hour).UnixMilli()
		}
		if st.DisabledUntil > 0 {
			st.DisabledReason = provider.Reason(cmp.Or(ps.DisabledReason, string(provider.ReasonBilling)))
		}
		for r, n := range ps.FailureCounts {
			if st.FailureCounts == nil {
				st.FailureCounts = map[provider.Reason]int{}
			}
			st.FailureCounts[provider.Reason(r)] = n
		}
		store.Usage[id] = st
	}
	return store
}

// scenarioResolver resolves every model of a scenario with its context
// window, or none.
type scenarioResolver struct {
	unresolvable bool
	window       int
}

func (r scenarioResolver) Resolve(ref string) (provider.Model, provider.Provider, error) {
	if r.unresolvable {
		return provider.Model{}, nil, errors.New("not in the catalog")
	}
	p, id, _ := strings.Cut(ref, "/")
	return provider.Model{Provider: p, ID: id, ContextWindow: r.window}, nil, nil
}

func hasErrorPayload(out *loopOut) bool {
	for _, p := range out.payloads {
		if p.IsError {
			return true
		}
	}
	return false
}

// jsonValue turns v into the generic JSON value the expected side holds.
func jsonValue(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
