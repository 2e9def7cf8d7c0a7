package service

import (
	"slices"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/permission"
)

// FuzzRequest: any subject and body are either refused or give a canonical
// lane token and a request within bounds; nothing panics.
func FuzzRequest(f *testing.F) {
	for _, seed := range []struct{ subject, body string }{
		{"agent.svc.alice.events", `{"run":"17","from":3,"after":40}`},
		{"agent.svc.=YWdlbnQ6bWFpbg.history", `{"from":9,"skip":2}`},
		{"agent.svc.=YWxpY2U.events", `{"run":"1"}`},
		{"agent.svc.a.b.events", ``},
		{"agent.svc..events", `{}`},
		{"agent.svc.alice.events", `{"run":"1"} {"run":"2"}`},
		{"agent.svc.alice.events", "\x81\xa3run\xa11"},
		{"agent.svc.alice.history", `{"skip":-1}`},
		{"agent.svc.alice.events", `{"run":"18446744073709551616"}`},
	} {
		f.Add(seed.subject, []byte(seed.body))
	}
	f.Fuzz(func(t *testing.T, subject string, body []byte) {
		for _, op := range []string{OpHistory, OpEvents, OpSettings} {
			tok, key, err := parseSubject(subject, op)
			if err != nil {
				continue
			}
			if again, err := events.KeyToken(key); err != nil || again != tok {
				t.Fatalf("token %q of key %q is not canonical (%q, %v)", tok, key, again, err)
			}
			if subject != Prefix+tok+"."+op || strings.ContainsAny(tok, ".*> ") {
				t.Fatalf("subject %q gave token %q", subject, tok)
			}
		}
		var e EventsRequest
		if err := DecodeRequest(body, &e); err == nil {
			if len(body) > MaxRequestBytes {
				t.Fatalf("accepted %d bytes", len(body))
			}
			if seq, err := parseRun(e.Run); err == nil && seq == 0 {
				t.Fatal("run 0 accepted")
			}
		}
		var h HistoryRequest
		_ = DecodeRequest(body, &h)
	})
}

// TestPermissionModelNamesTheService: the permission model (a pure package
// that cannot import this one) grants the subjects this service serves.
func TestPermissionModelNamesTheService(t *testing.T) {
	if permission.LaneService != Name || permission.ServicePrefix != Prefix {
		t.Errorf("permission names %q on %q, the service is %q on %q", permission.LaneService, permission.ServicePrefix, Name, Prefix)
	}
	served := map[string]bool{OpHistory: true, OpImport: true, OpEvents: true, OpSettings: true, OpBacklog: true}
	for _, op := range permission.ReadOps {
		if !served[op] {
			t.Errorf("permission.ReadOps grants %q, which the service does not serve", op)
		}
	}
	for _, op := range []string{OpHistory, OpEvents, OpSettings, OpBacklog} {
		if !slices.Contains(permission.ReadOps, op) {
			t.Errorf("read-only op %q is missing from permission.ReadOps: viewers could not use it", op)
		}
	}
	if slices.Contains(permission.ReadOps, OpImport) {
		t.Error("import writes a transcript: it must not be a read op")
	}
}
