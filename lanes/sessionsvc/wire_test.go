package sessionsvc

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
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
	served := map[string]bool{OpHistory: true, OpImport: true, OpEvents: true, OpSettings: true, OpBacklog: true, OpRuns: true}
	for _, op := range permission.ReadOps {
		if !served[op] {
			t.Errorf("permission.ReadOps grants %q, which the service does not serve", op)
		}
	}
	for _, op := range []string{OpHistory, OpEvents, OpSettings, OpBacklog, OpRuns} {
		if !slices.Contains(permission.ReadOps, op) {
			t.Errorf("read-only op %q is missing from permission.ReadOps: viewers could not use it", op)
		}
	}
	if slices.Contains(permission.ReadOps, OpImport) {
		t.Error("import writes a transcript: it must not be a read op")
	}
}

// TestEventsRequestOpenOmitted: a request without Open has the old shape,
// so an old service decodes it; Open is a field of its own.
func TestEventsRequestOpenOmitted(t *testing.T) {
	for _, c := range []struct {
		q    EventsRequest
		want string
	}{
		{EventsRequest{Run: "7", From: 4, After: 9}, `{"run":"7","from":4,"after":9}`},
		{EventsRequest{Run: "7", From: 4, After: 9, Open: true}, `{"run":"7","from":4,"after":9,"open":true}`},
		{EventsRequest{Run: "7", From: 4, Lease: true}, `{"run":"7","from":4,"lease":true}`},
	} {
		data, err := json.Marshal(c.q)
		if err != nil || string(data) != c.want {
			t.Errorf("%+v: %s, %v; want %s", c.q, data, err, c.want)
		}
		var back EventsRequest
		if err := DecodeRequest(data, &back); err != nil || back != c.q {
			t.Errorf("%s decodes to %+v, %v", data, back, err)
		}
	}
}

// TestOpen: only a final event and a lifecycle end or error may leave a
// run's final to its record.
func TestOpen(t *testing.T) {
	for _, c := range []struct {
		stream, phase string
		want          bool
	}{
		{events.StreamAssistant, "", true},
		{events.StreamLifecycle, events.PhaseStart, true},
		{events.StreamLifecycle, events.PhaseAborted, true},
		{events.StreamLifecycle, events.PhaseEnd, false},
		{events.StreamLifecycle, events.PhaseError, false},
		{events.StreamFinal, "", false},
	} {
		if got := Open(&events.Event{Stream: c.stream, Data: events.EventData{Phase: c.phase}}); got != c.want {
			t.Errorf("%s %s: open %v, want %v", c.stream, c.phase, got, c.want)
		}
	}
}

// TestLeaseOf: the wire form of a lane's lease at a moment: a holder that
// renews, one that missed its renewals (unresponsive, lapsing soon), a
// lease that lapsed, and an idle lane.
func TestLeaseOf(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_000_000)
	held := kvstore.LeaseState{Held: true, Holder: kvstore.LeaseInfo{Worker: "w1", Acquired: 5}, Renewed: now.Add(-4 * time.Second), TTL: 30 * time.Second}
	stale := held
	stale.Renewed = now.Add(-23 * time.Second)
	for _, c := range []struct {
		name string
		st   kvstore.LeaseState
		want *Lease
	}{
		{"renewed 4 s ago", held, &Lease{Worker: "w1", Since: 5, RenewedAgoMs: 4000, LapsesInMs: 26000}},
		{"not renewed for 23 s", stale, &Lease{Worker: "w1", Since: 5, RenewedAgoMs: 23000, LapsesInMs: 7000, Unresponsive: true}},
		{"lapsed 3 s ago", kvstore.LeaseState{Lapsed: now.Add(-3 * time.Second)}, &Lease{Lapsed: true, LapsedAgoMs: 3000}},
		{"idle", kvstore.LeaseState{}, nil},
	} {
		if got := LeaseOf(c.st, now); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
