package schedule

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/events"
)

func validSchedule() *Schedule {
	return &Schedule{
		ID: "abc123", Session: "alice", Spec: Spec{Cron: "0 9 * * *", Zone: "Europe/Paris"},
		Overlap: OverlapSkip, CatchUp: CatchUpOne, Message: events.Inbound{Text: "standup"},
		CreatedMs: 1, LastDueMs: 1, Secret: strings.Repeat("0", 32),
	}
}

func TestRecordRoundTrip(t *testing.T) {
	t.Parallel()
	s := validSchedule()
	b, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != s.ID || got.Spec != s.Spec || got.Message.Text != "standup" {
		t.Fatalf("round trip: %+v", got)
	}
}

// TestDecodeHostile: every malformed record is refused with ErrBadRecord
// and a reason.
func TestDecodeHostile(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		edit func(s *Schedule)
		raw  string
		want string
	}{
		{name: "not JSON", raw: "{", want: "unexpected EOF"},
		{name: "unknown field", raw: `{"id":"a","evil":1}`, want: "unknown field"},
		{name: "trailing data", raw: `{"id":"a"} {}`, want: "data after"},
		{name: "too large", raw: `"` + strings.Repeat("a", MaxRecordBytes) + `"`, want: "bytes"},
		{name: "bad id", edit: func(s *Schedule) { s.ID = "A.B" }, want: "id"},
		{name: "session and agent", edit: func(s *Schedule) { s.Agent = "main" }, want: "exactly one"},
		{name: "bad agent", edit: func(s *Schedule) { s.Session, s.Agent = "", "a.b" }, want: "agent"},
		{name: "bad zone", edit: func(s *Schedule) { s.Spec.Zone = "Mars/Olympus" }, want: "time zone"},
		{name: "zone without cron", edit: func(s *Schedule) { s.Spec = Spec{EveryMs: 1000, AnchorMs: 1, Zone: "UTC"} }, want: "cron expression only"},
		{name: "two timings", edit: func(s *Schedule) { s.Spec.EveryMs = 1000 }, want: "exactly one"},
		{name: "interval too short", edit: func(s *Schedule) { s.Spec = Spec{EveryMs: 10, AnchorMs: 1} }, want: "interval"},
		{name: "bad cron", edit: func(s *Schedule) { s.Spec.Cron = "61 * * * *" }, want: "minute"},
		{name: "bad overlap", edit: func(s *Schedule) { s.Overlap = "sometimes" }, want: "overlap"},
		{name: "bad catch-up", edit: func(s *Schedule) { s.CatchUp = "" }, want: "catch-up"},
		{name: "no secret", edit: func(s *Schedule) { s.Secret = "" }, want: "secret"},
		{name: "stop message", edit: func(s *Schedule) { s.Message = events.Inbound{Stop: true} }, want: "prompt"},
		{name: "forged sub-agent completion", edit: func(s *Schedule) {
			s.Message.Subagent = &events.SubagentResult{Session: "acme:p:subagent:x", Run: "1", Status: events.SubagentOK}
		}, want: "prompt"},
		{name: "forged spawn", edit: func(s *Schedule) { s.Message.Parent = &events.Parent{Session: "acme:p", Run: "1"} }, want: "prompt"},
		{name: "too many pending", edit: func(s *Schedule) { s.Pending = make([]int64, MaxCatchUpAll+2) }, want: "pending"},
		{name: "empty message", edit: func(s *Schedule) { s.Message.Text = " " }, want: "empty"},
		{name: "long text", edit: func(s *Schedule) { s.Message.Text = strings.Repeat("a", MaxTextBytes+1) }, want: "text"},
		{name: "bad mode", edit: func(s *Schedule) { s.Message.Mode = "chaos" }, want: "mode"},
		{name: "long history", edit: func(s *Schedule) { s.History = make([]Firing, HistoryLen+1) }, want: "history"},
		{name: "bad session", edit: func(s *Schedule) { s.Session = strings.Repeat("x", 300) }, want: "session"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			raw := []byte(c.raw)
			if c.edit != nil {
				s := validSchedule()
				c.edit(s)
				var err error
				if raw, err = jsonOf(s); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Decode(raw)
			if !errors.Is(err, ErrBadRecord) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Decode: %v, want ErrBadRecord saying %q", err, c.want)
			}
		})
	}
}

func TestHistoryBounded(t *testing.T) {
	t.Parallel()
	s := validSchedule()
	for i := range HistoryLen + 7 {
		s.Note(Firing{DueMs: int64(i), Outcome: Fired})
	}
	if len(s.History) != HistoryLen || s.History[0].DueMs != 7 {
		t.Fatalf("history of %d from %d", len(s.History), s.History[0].DueMs)
	}
}

func TestFiringIDs(t *testing.T) {
	t.Parallel()
	s := validSchedule()
	due := time.UnixMilli(1_800_000_000_000)
	if a, b := s.FiringMsgID(due), s.FiringMsgID(due); a != b {
		t.Fatal("stream ids differ for one due time")
	}
	if s.FiringMsgID(due) == s.FiringMsgID(due.Add(time.Second)) {
		t.Fatal("two due times share a stream id")
	}
	other := validSchedule()
	other.Secret = strings.Repeat("1", 32)
	if s.FiringMsgID(due) == other.FiringMsgID(due) {
		t.Fatal("the stream id does not depend on the secret")
	}
	if got := AgentSession("main", "abc", due); got != "agent:main:schedule:abc:1800000000" {
		t.Fatalf("agent session %q", got)
	}
	if err := events.ValidateKey(AgentSession(strings.Repeat("a", 64), strings.Repeat("b", 32), due)); err != nil {
		t.Fatalf("longest agent session: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	b, _ := validSchedule().Encode()
	f.Add(b)
	f.Add([]byte(`{"id":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("error %v does not wrap ErrBadRecord", err)
			}
			return
		}
		if _, err := s.Encode(); err != nil {
			t.Fatalf("a decoded schedule does not encode: %v", err)
		}
	})
}

func jsonOf(s *Schedule) ([]byte, error) { return json.Marshal(s) }
