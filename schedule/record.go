package schedule

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/lanefleet/lanefleet/events"
)

// ErrBadRecord means a stored or submitted schedule is invalid or
// undecodable; the error says what.
var ErrBadRecord = errors.New("schedule: bad schedule")

// Record bounds.
const (
	// MaxRecordBytes bounds a stored schedule, checked before decoding.
	MaxRecordBytes = 256 << 10
	// MaxTextBytes bounds a schedule's message text.
	MaxTextBytes = 64 << 10
	// HistoryLen is how many firings a schedule keeps (the newest).
	HistoryLen = 50
)

var (
	idPattern    = regexp.MustCompile(`^[a-z0-9]{1,32}$`)
	agentPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)

// Schedule is a stored schedule: what it sends where and when, its
// policies, and its state (what it last fired, its history).
type Schedule struct {
	ID string `json:"id"`
	// Session is the session every firing sends to; or, with Agent set,
	// each firing sends to a fresh session of its own (AgentSession).
	Session string  `json:"session,omitempty"`
	Agent   string  `json:"agent,omitempty"`
	Spec    Spec    `json:"spec"`
	Overlap Overlap `json:"overlap"`
	CatchUp CatchUp `json:"catchUp"`
	// Message is what each firing sends (text and inbound options; its
	// id is set per firing).
	Message   events.Inbound `json:"message"`
	Paused    bool           `json:"paused,omitempty"`
	CreatedMs int64          `json:"createdMs"`
	// LastDueMs is the latest due time handled (Unix ms): firings after
	// it are due. Creating, and resuming, set it to the time of the act.
	LastDueMs int64 `json:"lastDueMs"`
	// NextMs is the next due time (0: none, the schedule is over).
	NextMs int64 `json:"nextMs,omitempty"`
	// LastSession and LastRun name the latest fired run, which the
	// overlap policy looks at.
	LastSession string `json:"lastSession,omitempty"`
	LastRun     string `json:"lastRun,omitempty"`
	// Secret derives the firings' stream message ids (FiringMsgID): only
	// the fleet can compute them, so no sender can store one first and
	// make a firing a duplicate.
	Secret  string   `json:"secret,omitempty"`
	History []Firing `json:"history,omitempty"`
	// Pending holds the due times (Unix ms) of a plan's firings not yet
	// recorded as sent (History notes them once sent), and PlannedMs when
	// the plan was made. The plan is stored before its
	// firings are sent, so a handler that dies or loses its record write
	// leaves them to the next one, which sends them (a second send is a
	// duplicate the stream drops) instead of planning those due times
	// again.
	Pending   []int64 `json:"pending,omitempty"`
	PlannedMs int64   `json:"plannedMs,omitempty"`
}

// Firing is one entry of a schedule's run history.
type Firing struct {
	DueMs     int64   `json:"dueMs"`
	HandledMs int64   `json:"handledMs"`
	Outcome   Outcome `json:"outcome"`
	Count     int     `json:"count,omitempty"` // missed: how many due times
	Session   string  `json:"session,omitempty"`
	RunID     string  `json:"runId,omitempty"`
	Error     string  `json:"error,omitempty"` // failed: why
}

// ValidID reports whether id can be a schedule id: 1-32 of [a-z0-9].
func ValidID(id string) bool { return idPattern.MatchString(id) }

// Validate checks a schedule's fields. Errors wrap ErrBadRecord (and
// ErrBadSpec, ErrBadCron, *events.DecodeError where they apply).
func (s *Schedule) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadRecord, fmt.Sprintf(format, a...))
	}
	switch {
	case !ValidID(s.ID):
		return bad("id %q is not 1-32 of a-z 0-9", clip(s.ID))
	case (s.Session == "") == (s.Agent == ""):
		return bad("give exactly one of a session and an agent")
	case s.Agent != "" && !agentPattern.MatchString(s.Agent):
		return bad("agent %q is not 1-64 of A-Z a-z 0-9 _ -", clip(s.Agent))
	case len(s.Secret) != 32:
		return bad("no firing secret")
	case len(s.History) > HistoryLen:
		return bad("%d history entries (at most %d)", len(s.History), HistoryLen)
	case len(s.Pending) > MaxCatchUpAll+1:
		return bad("%d pending firings (at most %d)", len(s.Pending), MaxCatchUpAll+1)
	case len(s.Message.Text) > MaxTextBytes:
		return bad("message text of %d bytes (at most %d)", len(s.Message.Text), MaxTextBytes)
	case s.Message.Stop || s.Message.IsSettings() || len(s.Message.ToolResults) > 0 || len(s.Message.Tools) > 0 ||
		s.Message.Parent != nil || s.Message.Subagent != nil:
		return bad("a schedule sends a prompt (no stop, settings, tools, tool results, sub-agent spawn or completion)")
	case s.Message.Session != "" || s.Message.ID != "":
		return bad("the message's session and id are set per firing")
	}
	if s.Session != "" {
		if err := events.ValidateKey(s.Session); err != nil {
			return bad("session: %v", err)
		}
	}
	if _, err := ParseOverlap(string(s.Overlap)); err != nil || s.Overlap == "" {
		return bad("overlap %q", clip(string(s.Overlap)))
	}
	if _, err := ParseCatchUp(string(s.CatchUp)); err != nil || s.CatchUp == "" {
		return bad("catch-up %q", clip(string(s.CatchUp)))
	}
	if _, err := s.Spec.Compile(); err != nil {
		return also{err, ErrBadRecord}
	}
	in := s.Message
	if err := in.Validate(); err != nil {
		return also{fmt.Errorf("message: %w", err), ErrBadRecord}
	}
	return nil
}

// Encode returns the stored form of a valid schedule.
func (s *Schedule) Encode() ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("schedule: encode %s: %w", s.ID, err)
	}
	if len(b) > MaxRecordBytes {
		return nil, fmt.Errorf("%w: %d bytes stored (at most %d)", ErrBadRecord, len(b), MaxRecordBytes)
	}
	return b, nil
}

// Decode reads a stored schedule: bounded before it is parsed, unknown
// fields refused, and validated. Errors wrap ErrBadRecord.
func Decode(b []byte) (*Schedule, error) {
	if len(b) > MaxRecordBytes {
		return nil, fmt.Errorf("%w: %d bytes (at most %d)", ErrBadRecord, len(b), MaxRecordBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var s Schedule
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRecord, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: data after the record", ErrBadRecord)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Public returns a copy of the schedule without its secret: what a
// listing shows.
func (s *Schedule) Public() *Schedule {
	c := *s
	c.Secret = ""
	return &c
}

// Timer compiles the schedule's spec (valid in a decoded schedule).
func (s *Schedule) Timer() (*Timer, error) { return s.Spec.Compile() }

// Note adds a firing to the history, in due-time order (a plan's firings
// are noted once sent, after the due times it did not fire), keeping the
// newest HistoryLen.
func (s *Schedule) Note(f Firing) {
	s.History = append(s.History, f)
	if n := len(s.History); n > 1 && s.History[n-2].DueMs > f.DueMs {
		slices.SortStableFunc(s.History, func(a, b Firing) int { return cmp.Compare(a.DueMs, b.DueMs) })
	}
	if n := len(s.History) - HistoryLen; n > 0 {
		s.History = append(s.History[:0:0], s.History[n:]...)
	}
}

// Target returns the session a firing due at due sends to.
func (s *Schedule) Target(due time.Time) string {
	if s.Agent != "" {
		return AgentSession(s.Agent, s.ID, due)
	}
	return s.Session
}

// AgentSession names the fresh session of an agent schedule's firing:
// agent:<agent>:schedule:<id>:<due, Unix seconds>.
func AgentSession(agent, id string, due time.Time) string {
	return "agent:" + agent + ":schedule:" + id + ":" + strconv.FormatInt(due.Unix(), 10)
}

// LaneMsgID is a firing's message id on its lane (Lanefleet-Msg-Id):
// schedule:<id>:<due, Unix ms>.
func (s *Schedule) LaneMsgID(due time.Time) string {
	return "schedule:" + s.ID + ":" + strconv.FormatInt(due.UnixMilli(), 10)
}

// FiringMsgID is a firing's stream message id (Nats-Msg-Id): the same for
// every worker that fires the same due time, so the stream stores one
// copy, and unguessable without the schedule's secret.
func (s *Schedule) FiringMsgID(due time.Time) string {
	h := sha256.Sum256([]byte(s.Secret + "\x00" + s.ID + "\x00" + strconv.FormatInt(due.UnixMilli(), 10)))
	return "sched-" + hex.EncodeToString(h[:16])
}

// FiringMessage returns the message a firing due at due sends.
func (s *Schedule) FiringMessage(due, now time.Time) events.Inbound {
	in := s.Message
	in.ID = s.LaneMsgID(due)
	in.Sent = now.UnixMilli()
	return in
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
