package sessionsvc_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
)

// TestRuns: a session's runs with stored events, newest first, a page at
// a time, each summarised from its first and last events: state, start,
// end, duration, model, cost and error kind; another lane's runs and a
// run's fence marker are not listed.
func TestRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	var rep sessionsvc.RunsReply
	if err := b.request(t, "none", sessionsvc.OpRuns, nil, &rep); err != nil || len(rep.Runs) != 0 || rep.Total != 0 || rep.Next != "" {
		t.Fatalf("a lane without runs: %+v, %v", rep, err)
	}
	pub := func(tok, run string, seq uint64, stream string, d events.EventData) {
		t.Helper()
		b.publishEvent(t, tok, &events.Event{RunID: run, SessionKey: tok, Seq: seq, Attempt: 1, Stream: stream, TS: int64(1000*seq) + int64(len(run)), Data: d}, false)
	}
	cost := &events.UsageMeta{Total: 12, Cost: &events.CostMeta{Total: 0.25}}
	final := func(m events.Meta) events.EventData {
		return events.EventData{Result: &events.Result{Meta: m}}
	}
	// Run 3 answered, 5 failed, 7 waits for an approval, 9 was merged
	// into 11, 11 still runs.
	pub("lane", "3", 1, events.StreamLifecycle, events.EventData{Phase: events.PhaseStart})
	pub("lane", "3", 2, events.StreamFinal, final(events.Meta{DurationMs: 900, AgentMeta: &events.AgentMeta{Provider: "acme", Model: "m1", Usage: cost}}))
	pub("lane", "5", 1, events.StreamLifecycle, events.EventData{Phase: events.PhaseStart})
	pub("lane", "5", 2, events.StreamFinal, final(events.Meta{DurationMs: 50, Error: &events.RunError{Kind: "provider_error", Message: "no"}}))
	pub("lane", "7", 1, events.StreamLifecycle, events.EventData{Phase: events.PhaseStart})
	pub("lane", "7", 2, events.StreamFinal, final(events.Meta{PendingToolCalls: []events.PendingCall{{ID: "c", Name: "write", Approval: true}}}))
	pub("lane", "9", 1, events.StreamLifecycle, events.EventData{Phase: events.PhaseMerged, Text: "11"})
	pub("lane", "9", 2, events.StreamFinal, final(events.Meta{MergedInto: "11"}))
	pub("lane", "11", 1, events.StreamLifecycle, events.EventData{Phase: events.PhaseStart})
	pub("lane", "11", 2, events.StreamAssistant, events.EventData{Delta: "hi", Text: "hi"})
	pub("other", "4", 1, events.StreamLifecycle, events.EventData{Phase: events.PhaseStart})
	if _, err := b.js.Publish(b.ctx, events.EventPrefix+"lane.3.fence", []byte("x")); err != nil {
		t.Fatal(err)
	}

	show := func(rs []sessionsvc.RunSummary) string {
		var out []string
		for _, r := range rs {
			s := fmt.Sprintf("%s:%s@%d", r.RunID, r.State, r.StartedAt)
			if r.EndedAt > 0 {
				s += fmt.Sprintf("-%d", r.EndedAt)
			}
			if r.DurationMs > 0 {
				s += fmt.Sprintf(" %dms", r.DurationMs)
			}
			if r.Model != "" {
				s += " " + r.Provider + "/" + r.Model
			}
			if r.CostUSD > 0 {
				s += fmt.Sprintf(" $%.2f", r.CostUSD)
			}
			if x := r.Error + r.MergedInto; x != "" {
				s += " " + x
			}
			out = append(out, s)
		}
		return strings.Join(out, ", ")
	}
	rep = sessionsvc.RunsReply{}
	if err := b.request(t, "lane", sessionsvc.OpRuns, sessionsvc.RunsRequest{Limit: 2}, &rep); err != nil {
		t.Fatal(err)
	}
	if got, want := show(rep.Runs), "11:running@1002, 9:merged@1001-2001 11"; got != want || rep.Total != 5 || rep.Next != "9" {
		t.Fatalf("first page: %s (total %d, next %q), want %s (total 5, next 9)", got, rep.Total, rep.Next, want)
	}
	rep = sessionsvc.RunsReply{}
	if err := b.request(t, "lane", sessionsvc.OpRuns, sessionsvc.RunsRequest{Limit: 2, Before: "9"}, &rep); err != nil {
		t.Fatal(err)
	}
	if got, want := show(rep.Runs), "7:waiting@1001-2001, 5:failed@1001-2001 50ms provider_error"; got != want || rep.Next != "5" {
		t.Fatalf("second page: %s (next %q), want %s", got, rep.Next, want)
	}
	rep = sessionsvc.RunsReply{}
	if err := b.request(t, "lane", sessionsvc.OpRuns, sessionsvc.RunsRequest{Before: "5"}, &rep); err != nil {
		t.Fatal(err)
	}
	if got, want := show(rep.Runs), "3:done@1001-2001 900ms acme/m1 $0.25"; got != want || rep.Next != "" {
		t.Fatalf("last page: %s (next %q), want %s", got, rep.Next, want)
	}
	for _, bad := range []string{`{"limit":-1}`, `{"before":"x"}`, `{"before":"007"}`, `{"cursor":"1"}`} {
		if err := b.request(t, "lane", sessionsvc.OpRuns, bad, &rep); err == nil || err.Code != sessionsvc.CodeBadRequest {
			t.Fatalf("%s: %v", bad, err)
		}
	}
}
