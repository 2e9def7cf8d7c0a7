package runner

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/compaction"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// admissionFunc adapts a function to Admission; settle records usage.
type admissions struct {
	mu      sync.Mutex
	calls   []AdmitCall
	settled []message.Usage
	refuse  int // refuse the call with this index (0 = none)
}

func (a *admissions) Admit(_ context.Context, c AdmitCall) (Admitted, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, c)
	if len(a.calls) == a.refuse {
		return nil, &AdmitRefusal{Kind: events.KindBudgetReached, Text: "Budget reached: tenant acme."}
	}
	return a, nil
}

func (a *admissions) Settle(u message.Usage) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.settled = append(a.settled, u)
	return "acme at 80%"
}

// TestAdmission: every model call is admitted first (the first one marked)
// and settled with its usage, a soft limit's warning shows as a lifecycle
// event, and a refused call ends the turn with the refusal's reply while
// what the turn did before stays.
func TestAdmission(t *testing.T) {
	t.Parallel()
	const script = `#script {"replies":[{"toolCalls":[{"id":"c1","name":"nope","arguments":{}}]},{"text":"Done."}]}`
	for _, tc := range []struct {
		name      string
		refuse    int
		calls     int
		wantKind  string
		wantText  string
		wantReply bool // the first reply is in the transcript
	}{
		{"admitted", 0, 2, "", "Done.", true},
		{"first call refused", 1, 1, events.KindBudgetReached, "Budget reached: tenant acme.", false},
		{"second call refused", 2, 2, events.KindBudgetReached, "Budget reached: tenant acme.", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			adm := &admissions{refuse: tc.refuse}
			r, err := New(Config{DefaultModel: "scripted/script", Resolver: multiResolver{}, Admission: adm})
			if err != nil {
				t.Fatal(err)
			}
			s := &sink{}
			out, err := r.Run(t.Context(), Input{SessionKey: "acme:1", RunID: "r1", Inbound: &events.Inbound{Text: script}}, s)
			if err != nil {
				t.Fatal(err)
			}
			if len(adm.calls) != tc.calls || !adm.calls[0].FirstCall || adm.calls[0].SessionKey != "acme:1" ||
				(len(adm.calls) > 1 && adm.calls[1].FirstCall) {
				t.Fatalf("admitted %+v", adm.calls)
			}
			settled := tc.calls
			if tc.refuse > 0 {
				settled--
			}
			if len(adm.settled) != settled {
				t.Fatalf("settled %d calls, want %d", len(adm.settled), settled)
			}
			for _, u := range adm.settled {
				if u.Input == 0 || u.Output == 0 {
					t.Errorf("settled without the call's usage: %+v", u)
				}
			}
			warnings := 0
			for _, e := range s.evs {
				if e.Data.Phase == events.PhaseBudgetWarning && e.Data.Text == "acme at 80%" {
					warnings++
				}
			}
			if warnings != settled {
				t.Errorf("%d warnings, want one per settled call (%d)", warnings, settled)
			}
			res := out.Result
			if got := res.Payloads[len(res.Payloads)-1].Text; got != tc.wantText {
				t.Errorf("reply %q, want %q", got, tc.wantText)
			}
			if (res.Meta.Error == nil && tc.wantKind != "") || (res.Meta.Error != nil && res.Meta.Error.Kind != tc.wantKind) {
				t.Errorf("error %+v, want kind %q", res.Meta.Error, tc.wantKind)
			}
			replies := 0
			for _, e := range out.Entries {
				if e.Message != nil && e.Message.Role == message.RoleAssistant {
					replies++
				}
			}
			if (replies > 0) != tc.wantReply {
				t.Errorf("%d replies kept, want some: %v", replies, tc.wantReply)
			}
		})
	}
}

// failingAdmission cannot reach its budgets.
type failingAdmission struct{}

func (failingAdmission) Admit(context.Context, AdmitCall) (Admitted, error) {
	return nil, errors.New("budgets bucket: no responders")
}

// TestAdmissionFailureFailsTheRun: an Admission that cannot decide fails
// the run (the lane tries the turn again); no call is made and nothing is
// added to the transcript.
func TestAdmissionFailureFailsTheRun(t *testing.T) {
	t.Parallel()
	r, err := New(Config{DefaultModel: "scripted/echo", Resolver: multiResolver{}, Admission: failingAdmission{}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.Run(t.Context(), Input{SessionKey: "acme:1", RunID: "r1", Inbound: &events.Inbound{Text: "hi"}}, &sink{})
	if err == nil || !strings.Contains(err.Error(), "no responders") || out != nil {
		t.Fatalf("Run = %+v, %v; want the admission's error", out, err)
	}
}

// unavailableAdmission cannot reach its budgets' store the first down
// times it is asked, then admits every call.
type unavailableAdmission struct {
	admissions
	down int
}

func (a *unavailableAdmission) Admit(ctx context.Context, c AdmitCall) (Admitted, error) {
	a.mu.Lock()
	if a.down > 0 {
		a.down--
		a.mu.Unlock()
		return nil, &AdmitUnavailable{Err: errors.New("budgetstore: tenant acme: nats: no responders available for request")}
	}
	a.mu.Unlock()
	return a.admissions.Admit(ctx, c)
}

// TestAdmissionUnavailableWaits: while the budget store does not answer,
// the run waits and asks again (each wait a retrying event saying why)
// instead of failing its attempt, which would count toward the message's
// attempts; once the store answers, the call is made. (Before, the run
// failed at once.)
func TestAdmissionUnavailableWaits(t *testing.T) {
	t.Parallel()
	adm := &unavailableAdmission{down: 2}
	r, err := New(Config{DefaultModel: "scripted/echo", Resolver: multiResolver{}, Admission: adm, AdmitWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{}
	out, err := r.Run(t.Context(), Input{SessionKey: "acme:1", RunID: "r1", Inbound: &events.Inbound{Text: "hi"}}, s)
	if err != nil || out.Result.Meta.Error != nil || out.Result.Payloads[0].Text != "echo: hi" {
		t.Fatalf("Run = %+v, %v; want the reply once the store answers", out, err)
	}
	var waits []string
	for _, e := range s.evs {
		if e.Stream == events.StreamLifecycle && e.Data.Phase == events.PhaseRetrying {
			waits = append(waits, e.Data.Error)
		}
	}
	if len(waits) != 2 || !strings.Contains(waits[0], "the budget store is unavailable") || !strings.Contains(waits[0], "no responders") ||
		!strings.Contains(waits[0], "does not count toward its attempts") {
		t.Fatalf("waits %q", waits)
	}
	if len(adm.calls) != 1 || !adm.calls[0].FirstCall || len(adm.settled) != 1 {
		t.Fatalf("admitted %+v, settled %d", adm.calls, len(adm.settled))
	}
}

// TestCompactionAdmitted: a compaction's summary calls are admitted and
// settled like a turn's (not counted as a turn); a refused one fails the
// compaction, leaving the transcript as it was. (Before, they were made
// without asking.)
func TestCompactionAdmitted(t *testing.T) {
	t.Parallel()
	var history []message.Entry
	for range 30 {
		h := toolHistory(strings.Repeat("line of a long log\n", 100))
		if len(history) > 0 {
			id := history[len(history)-1].ID
			h[0].ParentID = &id
		}
		history = append(history, h...)
	}
	for _, tc := range []struct {
		name   string
		refuse int
	}{{"admitted", 0}, {"refused", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			adm := &admissions{refuse: tc.refuse}
			r, err := New(Config{DefaultModel: "scripted/echo", Resolver: multiResolver{}, Admission: adm,
				Compactor: PiCompactor{Settings: compaction.Settings{KeepRecentTokens: 2000}}})
			if err != nil {
				t.Fatal(err)
			}
			out, err := r.Compact(t.Context(), Input{SessionKey: "acme:1", RunID: "r1", SessionID: "sid", Inbound: &events.Inbound{}, History: history}, "", &sink{})
			if err != nil {
				t.Fatal(err)
			}
			if len(adm.calls) == 0 || !adm.calls[0].Compaction || adm.calls[0].FirstCall || adm.calls[0].SessionKey != "acme:1" {
				t.Fatalf("admitted %+v: want the summary calls, not as a turn", adm.calls)
			}
			failed := out.Result.Meta.Error != nil
			if tc.refuse == 0 && (failed || len(adm.settled) != len(adm.calls)) {
				t.Fatalf("result %+v, settled %d of %d calls", out.Result, len(adm.settled), len(adm.calls))
			}
			if tc.refuse > 0 && (!failed || len(out.Entries) != 0 || !strings.Contains(out.Result.Payloads[0].Text, "Budget reached")) {
				t.Fatalf("result %+v, entries %d: want the compaction failed by the refusal", out.Result, len(out.Entries))
			}
		})
	}
}

// movingAdmission moves every call made with acme:a to acme:b (as a rate
// limit of acme:a's with no room would), and records the calls.
type movingAdmission struct {
	mu    sync.Mutex
	calls []AdmitCall
}

func (a *movingAdmission) Admit(_ context.Context, c AdmitCall) (Admitted, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, c)
	if c.AuthProfile == "acme:a" && slices.Contains(c.Alternates, "acme:b") {
		return nil, &AdmitMove{Profile: "acme:b", Reason: provider.ReasonRateLimit, Text: "acme:a has no room"}
	}
	return nil, nil
}

// TestAdmissionMovesProfile: a call the Admission moves to another auth
// profile is made with that profile's key on the run's next attempt (its
// attempt event names the profile and the reason), the first profile is
// not marked failed, and the turn's first call is still the one that
// counts the turn. A run pinned to its profile offers no alternates.
func TestAdmissionMovesProfile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		locked string
		keys   string
	}{
		{"moves", "", "sk-b"},
		{"pinned", "acme:a", "sk-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := &seq{}
			auth := twoProfiles(time.Now)
			adm := &movingAdmission{}
			r, err := New(Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: p}, Auth: auth, Admission: adm})
			if err != nil {
				t.Fatal(err)
			}
			s := &sink{}
			out, err := r.Run(t.Context(), Input{RunID: "r", Inbound: &events.Inbound{Text: "hi"}, Settings: Settings{AuthProfile: tc.locked, AuthProfileLocked: tc.locked != ""}}, s)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.used(); got != tc.keys || out.Result.Meta.Error != nil || out.Result.Payloads[0].Text != "fine" {
				t.Fatalf("keys %q (want %q), result %+v", got, tc.keys, out.Result)
			}
			if tc.locked != "" {
				if len(adm.calls) != 1 || len(adm.calls[0].Alternates) != 0 {
					t.Fatalf("a pinned run's calls %+v, want one without alternates", adm.calls)
				}
				return
			}
			if len(adm.calls) != 2 || !adm.calls[0].FirstCall || !adm.calls[1].FirstCall || adm.calls[1].AuthProfile != "acme:b" {
				t.Fatalf("admitted %+v", adm.calls)
			}
			var attempts []string
			for _, e := range s.evs {
				if e.Stream == events.StreamAttempt {
					attempts = append(attempts, e.Data.AuthProfile+"/"+e.Data.Reason)
				}
			}
			if strings.Join(attempts, ",") != "acme:a/,acme:b/rate_limit" {
				t.Fatalf("attempt events %v", attempts)
			}
			st, _ := auth.Snapshot()
			if u := st.Usage["acme:a"]; u.ErrorCount != 0 || u.CooldownUntil != 0 {
				t.Fatalf("acme:a marked failed: %+v", u)
			}
		})
	}
}
