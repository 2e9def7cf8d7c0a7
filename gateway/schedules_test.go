package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/schedule"
)

// TestScheduleRoutes: an admin adds, reads, pauses, resumes, lists and
// removes a schedule over HTTP; the secret its firing ids derive from is
// never shown; bad input is invalid_input, an unknown id not_found.
// (TestTenantIsolation checks that no other role reaches these routes.)
func TestScheduleRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	read := func(resp *http.Response, want int) string {
		t.Helper()
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d, want %d: %s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, want, body)
		}
		if strings.Contains(string(body), `"secret"`) {
			t.Fatalf("the secret is shown: %s", body)
		}
		return string(body)
	}
	body := read(b.do(t, "root", "POST", "/api/schedules", `{"session":"acme:daily","cron":"0 9 * * MON-FRI","tz":"Europe/Paris","overlap":"buffer-one","text":"stand-up"}`, "Content-Type", "application/json"), 201)
	var sc schedule.Schedule
	if err := json.Unmarshal([]byte(body), &sc); err != nil || !schedule.ValidID(sc.ID) || sc.NextMs == 0 || sc.Overlap != schedule.OverlapBufferOne || sc.CatchUp != schedule.CatchUpOne {
		t.Fatalf("added: %s (%v)", body, err)
	}
	if body = read(b.do(t, "root", "GET", "/api/schedules/"+sc.ID, ""), 200); !strings.Contains(body, `"text":"stand-up"`) {
		t.Fatalf("get: %s", body)
	}
	if body = read(b.do(t, "root", "POST", "/api/schedules/"+sc.ID+"/pause", ""), 200); !strings.Contains(body, `"paused":true`) {
		t.Fatalf("pause: %s", body)
	}
	if body = read(b.do(t, "root", "POST", "/api/schedules/"+sc.ID+"/resume", ""), 200); strings.Contains(body, `"paused"`) {
		t.Fatalf("resume: %s", body)
	}
	if body = read(b.do(t, "root", "GET", "/api/schedules", ""), 200); !strings.Contains(body, sc.ID) {
		t.Fatalf("list: %s", body)
	}
	if body = read(b.do(t, "root", "GET", "/api/schedules/"+sc.ID+"/history", ""), 200); body != "{\"history\":[]}\n" {
		t.Fatalf("history: %q", body)
	}
	read(b.do(t, "root", "DELETE", "/api/schedules/"+sc.ID, ""), 204)
	read(b.do(t, "root", "GET", "/api/schedules/"+sc.ID, ""), 404)
	read(b.do(t, "root", "GET", "/api/schedules/NOT.AN.ID", ""), 404)
	for _, bad := range []string{
		`{"session":"s","text":"x"}`,
		`{"session":"s","cron":"61 * * * *","text":"x"}`,
		`{"session":"s","every":"soon","text":"x"}`,
		`{"session":"s","every":"10ms","text":"x"}`,
		`{"session":"s","at":"2001-01-01T00:00:00Z","text":"x"}`,
		`{"session":"s","every":"1m","overlap":"sometimes","text":"x"}`,
		`{"session":"s","every":"1m","text":""}`,
		`{"session":"s","every":"1m","text":"x","evil":1}`,
	} {
		resp := b.do(t, "root", "POST", "/api/schedules", bad, "Content-Type", "application/json")
		body := read(resp, 400)
		if !strings.Contains(body, "invalid_input") && !strings.Contains(body, "bad_json") {
			t.Errorf("%s: %s", bad, body)
		}
	}
}
