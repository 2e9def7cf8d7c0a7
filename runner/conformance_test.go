package runner

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/guard"
	"github.com/lanefleet/lanefleet/internal/conformance"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/failover"
)

// scenarioAttempt is one attempt of a run-loop.json scenario.
type scenarioAttempt struct {
	OK                       bool     `json:"ok"`
	PromptError              string   `json:"promptError"`
	AssistantError           string   `json:"assistantError"`
	InAttemptCompactions     int      `json:"inAttemptCompactions"`
	SnapshotHasOversized     bool     `json:"snapshotHasOversizedToolResult"`
	TimedOut                 bool     `json:"timedOut"`
	TimedOutDuringCompaction bool     `json:"timedOutDuringCompaction"`
	Aborted                  bool     `json:"aborted"`
	AssistantTexts           []string `json:"assistantTexts"`
}

// scriptedLoop plays a scenario's attempts, compactions and truncation, and
// records what the loop asked of it.
type scriptedLoop struct {
	attempts    []scenarioAttempt
	compacts    []bool
	truncN      int
	window      int
	n           int
	explicit    int
	truncations int
	// profiles are the profiles the attempts ran with, in order;
	// overflows the indexes of the attempts that reported an overflow.
	profiles  []string
	overflows []int
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

// overflowRetries counts the overflows the loop retried (every overflow
// but one that ended the run).
func (s *scriptedLoop) overflowRetries() int {
	n := 0
	for _, i := range s.overflows {
		if i < s.n-1 {
			n++
		}
	}
	return n
}

func (s *scriptedLoop) attempt(_ context.Context, req attemptReq) attemptOut {
	a := scenarioAttempt{OK: true}
	if s.n < len(s.attempts) {
		a = s.attempts[s.n]
	}
	s.profiles = append(s.profiles, req.profile)
	if failover.IsLikelyContextOverflow(a.PromptError) || (a.PromptError == "" && failover.IsLikelyContextOverflow(a.AssistantError)) {
		s.overflows = append(s.overflows, s.n)
	}
	s.n++
	out := attemptOut{aborted: a.Aborted, timedOut: a.TimedOut, timedOutDuringCompaction: a.TimedOutDuringCompaction,
		compactions: a.InAttemptCompactions, texts: a.AssistantTexts}
	if a.PromptError != "" {
		out.promptErr = errors.New(a.PromptError)
	}
	switch {
	case a.AssistantError != "":
		out.last = &message.Message{Role: message.RoleAssistant, StopReason: message.StopError, ErrorMessage: a.AssistantError}
		out.lastErr = errors.New(a.AssistantError)
	case a.OK:
		out.last = &message.Message{Role: message.RoleAssistant, StopReason: message.StopStop, Content: message.BlocksOf(message.Text("ok"))}
		out.texts = []string{"ok"}
	}
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
	now := time.UnixMilli(conformance.Now)
	conformance.Run(t, "run-loop", func(t *testing.T, c conformance.Case) {
		var in struct {
			Profiles           []string        `json:"profiles"`
			ProfileCounts      []int           `json:"profileCounts"`
			FallbackConfigured bool            `json:"fallbackConfigured"`
			Attempts           json.RawMessage `json:"attempts"`
			CompactOutcomes    []bool          `json:"compactOutcomes"`
			ContextWindow      int             `json:"contextWindowTokens"`
			TruncationOutcome  *struct {
				Truncated bool `json:"truncated"`
				Count     int  `json:"count"`
			} `json:"truncationOutcome"`
			ThinkLevel    string `json:"thinkLevel"`
			LockedProfile string `json:"lockedProfile"`
			ProfileStats  map[string]struct {
				CooldownActive bool           `json:"cooldownActive"`
				DisabledActive bool           `json:"disabledActive"`
				DisabledReason string         `json:"disabledReason"`
				CooldownUntil  int64          `json:"cooldownUntil"`
				DisabledUntil  int64          `json:"disabledUntil"`
				ErrorCount     int            `json:"errorCount"`
				FailureCounts  map[string]int `json:"failureCounts"`
			} `json:"profileStats"`
			// The requested model, and whether it resolves (§3.1 step 2).
			Provider      string `json:"provider"`
			Model         string `json:"model"`
			UnknownModel  bool   `json:"unknownModel"`
			ModelResolves *bool  `json:"modelResolves"`
		}
		var exp map[string]any
		if err := json.Unmarshal(c.Input, &in); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(c.Expected, &exp); err != nil {
			t.Fatal(err)
		}
		if len(in.ProfileCounts) > 0 {
			// The cap runModel gives the loop (TestRetryLimitReached
			// drives a loop into it).
			var got []any
			for _, n := range in.ProfileCounts {
				got = append(got, float64(IterationCap(n)))
			}
			if ok, diff := conformance.Equal(got, exp["maxIterations"]); !ok {
				t.Fatal(diff)
			}
			return
		}
		window := in.ContextWindow
		if window == 0 {
			window = guard.DefaultContextTokens
		}
		sl := &scriptedLoop{compacts: in.CompactOutcomes, window: window}
		if err := json.Unmarshal(in.Attempts, &sl.attempts); err != nil {
			t.Fatalf("attempts: %v (a scenario the harness cannot play belongs in DEVIATIONS)", err)
		}
		if in.TruncationOutcome != nil && in.TruncationOutcome.Truncated {
			sl.truncN = in.TruncationOutcome.Count
		}
		store := authprofile.Store{Usage: map[string]authprofile.State{}}
		for _, id := range in.Profiles {
			store.Profiles = append(store.Profiles, authprofile.Profile{ID: id, Type: authprofile.TypeAPIKey, Provider: "anthropic", Key: "sk-" + provider.Secret(id)})
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
		auth := &recordingAuth{MemoryAuth: NewMemoryAuth(store, authprofile.Config{}, func() time.Time { return now })}
		model := provider.Model{Provider: cmp.Or(in.Provider, "anthropic"), ID: cmp.Or(in.Model, "claude-opus-4-6")}
		req := loopReq{runID: "run-1", model: model, contextWindow: window,
			thinking: provider.ThinkingLevel(in.ThinkLevel), auth: auth, locked: in.LockedProfile,
			fallbackConfigured: in.FallbackConfigured, now: func() time.Time { return now }}
		var out *loopOut
		// The model resolves first (§3.1 step 2): an unknown one throws
		// before anything else.
		_, _, err := resolveModel(scenarioResolver{unknown: in.UnknownModel || (in.ModelResolves != nil && !*in.ModelResolves)}, model.Ref())
		if err == nil {
			out, err = runModel(t.Context(), req, sl)
		}

		result := "success"
		switch {
		case err != nil:
			result = "throws"
		case out.runErr != nil || hasErrorPayload(out):
			result = "errorPayload"
		}
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
		check("result", result)
		check("attemptCount", sl.n)
		check("explicitCompactions", sl.explicit)
		if out != nil {
			var kind any
			if out.runErr != nil {
				kind = out.runErr.Kind
			}
			check("metaErrorKind", kind)
			check("agentMetaCompactionCount", out.compactions)
			check("payloads", out.payloads)
			check("metaAborted", out.aborted)
			check("thinkLevels", out.thinkLevels)
		}
		check("toolResultTruncation", sl.truncations > 0)
		check("overflowAttemptsUsed", sl.overflowRetries())
		check("rotated", sl.rotated())
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
		if _, ok := exp["profileCooldownAfterRun"]; ok && len(in.Profiles) > 0 {
			var cd any
			if st := auth.State(in.Profiles[0]); st.CooldownUntil > 0 {
				cd = st.CooldownUntil
			}
			check("profileCooldownAfterRun", cd)
		}
		if th, ok := exp["thrown"]; ok {
			checked["thrown"] = true
			if err == nil {
				t.Fatalf("nothing thrown, want %v", th)
			}
			switch th := th.(type) {
			case string:
				if err.Error() != th {
					t.Errorf("thrown %q, want %q", err.Error(), th)
				}
			case map[string]any:
				var pe *provider.Error
				if !errors.As(err, &pe) {
					t.Fatalf("thrown %T %v, want a FailoverError", err, err)
				}
				if r, ok := th["reason"]; ok && string(pe.Reason) != r {
					t.Errorf("reason %q, want %v", pe.Reason, r)
				}
				if s, ok := th["status"]; ok && (s == nil && pe.Status != 0 || s != nil && float64(pe.Status) != s) {
					t.Errorf("status %d, want %v", pe.Status, s)
				}
				if m, ok := th["message"]; ok && pe.Message != m {
					t.Errorf("message %q, want %v", pe.Message, m)
				}
			}
		}
	})
}

// scenarioResolver resolves every model of a scenario, or none.
type scenarioResolver struct{ unknown bool }

func (r scenarioResolver) Resolve(ref string) (provider.Model, provider.Provider, error) {
	if r.unknown {
		return provider.Model{}, nil, errors.New("not in the catalog")
	}
	p, id, _ := strings.Cut(ref, "/")
	return provider.Model{Provider: p, ID: id}, nil, nil
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
