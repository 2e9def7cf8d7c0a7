package gateway

import (
	"fmt"
	"strings"
	"testing"
)

// TestListRuns: a session's runs page newest first with their state,
// start, duration and model, by cursor, for its sender and its viewer; a
// bad cursor is a 400.
func TestListRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	var ids []string
	for i := range 3 {
		resp := b.do(t, "acme", "POST", "/api/sessions/acme:runs/messages", fmt.Sprintf(`{"text":"m%d","stream":true}`, i))
		evs, err := readSSE(resp.Body, nil)
		resp.Body.Close()
		if err != nil || len(evs) == 0 {
			t.Fatalf("send %d: %v", i, err)
		}
		ids = append(ids, resp.Header.Get("Lanefleet-Run"))
	}
	type page struct {
		Session string
		Runs    []struct {
			RunID      string
			State      string
			StartedAt  int64
			EndedAt    int64
			DurationMs int64
			Provider   string
			Model      string
		}
		Total int
		Next  string
	}
	list := func(who, query string) page {
		t.Helper()
		resp := b.do(t, who, "GET", "/api/sessions/acme:runs/runs"+query, "")
		var p page
		readJSON(t, resp, &p)
		if resp.StatusCode != 200 {
			t.Fatalf("%s runs%s: %d", who, query, resp.StatusCode)
		}
		return p
	}
	first := list("acme", "?limit=2")
	var got []string
	for _, r := range first.Runs {
		got = append(got, r.RunID)
		if r.State != "done" || r.StartedAt == 0 || r.EndedAt < r.StartedAt || r.Provider+"/"+r.Model != "scripted/echo" {
			t.Fatalf("run %+v", r)
		}
	}
	if want := ids[2] + "," + ids[1]; strings.Join(got, ",") != want || first.Total != 3 || first.Next != ids[1] || first.Session != "acme:runs" {
		t.Fatalf("first page %+v, want runs %s", first, want)
	}
	second := list("acme-viewer", "?limit=2&cursor="+first.Next)
	if len(second.Runs) != 1 || second.Runs[0].RunID != ids[0] || second.Next != "" {
		t.Fatalf("second page %+v", second)
	}
	if p := list("acme", ""); len(p.Runs) != 3 {
		t.Fatalf("default page: %+v", p)
	}
	if p := list("acme", "?cursor=1"); len(p.Runs) != 0 || p.Runs == nil || p.Next != "" {
		t.Fatalf("past the oldest: %+v", p)
	}
	wantProblem(t, b.do(t, "acme", "GET", "/api/sessions/acme:runs/runs?cursor=abc", ""), 400, CodeInvalidInput)
	wantProblem(t, b.do(t, "acme", "GET", "/api/sessions/acme:runs/runs?limit=-1", ""), 400, CodeInvalidInput)
	wantProblem(t, b.do(t, "acme", "GET", "/api/sessions/acme:runs/runs?cursor="+strings.Repeat("9", 30), ""), 400, CodeInvalidInput)
}
