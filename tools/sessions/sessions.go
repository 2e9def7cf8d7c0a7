// Package sessions holds the session tools: sessions_list,
// sessions_history and sessions_send, which let a run see and message the
// other sessions its operator's [Policy] allows (by default those of its
// own tenant, never another's), and sessions_spawn and sessions_yield,
// which start sub-agents and wait for them (package subagent has their
// rules). The fleet supplies a [Backend]: the listing, the transcripts and
// the publish onto a session's lane.
//
// Files: sessions.go (policy, list, history, send), spawn.go (spawn,
// yield).
package sessions

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/agents"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/governance"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/internal/toolargs"
)

// Scopes: which sessions a session's tools reach.
const (
	// ScopeTenant reaches the sessions of the caller's tenant (its key's
	// prefix up to the tenant separator); a session without a tenant
	// reaches none but itself.
	ScopeTenant = "tenant"
	// ScopeAgent narrows ScopeTenant to the sessions of the caller's
	// agent: keys "agent:<id>:…" are agent <id>'s, others the default
	// agent's.
	ScopeAgent = "agent"
)

// Policy is the operator's rule for the session tools.
type Policy struct {
	// Scope is ScopeTenant or ScopeAgent; "" = ScopeTenant.
	Scope string
	// Tenants derives a key's tenant, as the fleet's governance does.
	Tenants governance.TenantRule
	// MaxDepth bounds sub-agents' nesting (0 = subagent.MaxDepthDefault);
	// MaxChildren the children one run spawns (0 =
	// subagent.MaxChildrenDefault).
	MaxDepth, MaxChildren int
}

// Validate reports an unknown scope.
func (p Policy) Validate() error {
	switch p.Scope {
	case "", ScopeTenant, ScopeAgent:
		if p.MaxDepth < 0 || p.MaxChildren < 0 {
			return fmt.Errorf("sessions: sub-agent limits must be 0 (the default) or more, not depth %d, children %d", p.MaxDepth, p.MaxChildren)
		}
		if p.MaxDepth > events.MaxAncestors {
			// A spawn names every session above the child.
			return fmt.Errorf("sessions: sub-agent depth %d is over the most a spawn can carry (%d)", p.MaxDepth, events.MaxAncestors)
		}
		return nil
	}
	return fmt.Errorf("sessions: scope %q: want %s or %s", p.Scope, ScopeTenant, ScopeAgent)
}

// Allows reports whether caller's tools may see and message target. A
// session always reaches itself for listing and history; never a session
// of another tenant.
func (p Policy) Allows(caller, target string) bool {
	if caller == target {
		return true
	}
	tenant := p.Tenants.Tenant(caller)
	if tenant == "" || p.Tenants.Tenant(target) != tenant {
		return false
	}
	return p.Scope != ScopeAgent || agentOf(caller) == agentOf(target)
}

// Prefixes are the key prefixes a listing for caller may be narrowed to
// (before Allows decides each key); nil with keys = [caller] for a
// caller without a tenant.
func (p Policy) Prefixes(caller string) (prefixes, keys []string) {
	tenant := p.Tenants.Tenant(caller)
	if tenant == "" {
		return nil, []string{caller}
	}
	sep := p.Tenants.Separator
	if sep == "" {
		sep = governance.TenantSeparatorDefault
	}
	return []string{tenant + sep}, nil
}

// agentOf is the agent a key names ("agent:<id>:…"), "" for the default
// agent (agents.Of's rule).
func agentOf(key string) string {
	id, _ := agents.Of(key, "")
	return id
}

// Info is one session of a listing.
type Info struct {
	Key          string
	LastActivity time.Time // zero = unknown
	Running      bool
	Runs         int // runs with stored events
}

// Backend is what the tools need from the fleet.
type Backend interface {
	// List returns the sessions with recent activity whose key starts
	// with one of prefixes or is one of keys, newest first, at most
	// limit.
	List(ctx context.Context, prefixes, keys []string, limit int) ([]Info, error)
	// History hands the session's current transcript (after its last
	// reset) to fn a turn at a time, newest first: the turn's position
	// (higher for a later turn) and its entries, oldest first. It stops
	// when fn returns false, at the transcript's start, or at a bound of
	// q, and reads from the store only the turns it hands over (and what
	// finds them), so what one call loads is bounded by q however long
	// the transcript is.
	History(ctx context.Context, key string, q HistoryQuery, fn func(turn uint64, entries []message.Entry) bool) (HistoryRead, error)
	// Send publishes text onto the session's lane as a new message, with
	// message id id (the lane drops a second message of the same id), and
	// returns its run id.
	Send(ctx context.Context, key, text, id string) (runID string, err error)
	// Spawn publishes a sub-agent's spawn message onto the child
	// session's lane, with publishID as the stream's de-duplication key
	// and in.ID as the lane's (a spawn made again after a crash is
	// dropped by the child's lane), and returns its run id.
	Spawn(ctx context.Context, key string, in *events.Inbound, publishID string) (runID string, err error)
}

// HistoryQuery is what one Backend.History call reads.
type HistoryQuery struct {
	// Before reads the turns before this position (exclusive; 0 = from
	// the newest turn).
	Before uint64
	// MaxTurns bounds the turns read (at least 1 is), MaxBytes their
	// stored bytes (the turn that crosses it is the last).
	MaxTurns, MaxBytes int
}

// HistoryRead is what one Backend.History call read.
type HistoryRead struct {
	Turns int // turns read
	Bytes int // their stored bytes
	// More says older turns are left that the call did not hand over (a
	// bound of the query, or fn, stopped it); Next is the Before of a
	// call that goes on with them.
	More bool
	Next uint64
}

// Bounds.
const (
	defaultListLimit    = 20
	maxListLimit        = 100
	defaultHistoryLimit = 20
	maxHistoryLimit     = 100
	// messageChars caps one message's text in a history.
	messageChars = 4000
	// historyBytes caps a history's text.
	historyBytes = 48 << 10
	// historyReadTurns and historyReadBytes bound what one sessions_history
	// call reads from the store: a transcript's turns with large tool
	// results or images may hold megabytes for a few messages of text.
	historyReadTurns = 2 * maxHistoryLimit
	historyReadBytes = 4 << 20
	// maxSendBytes caps a sessions_send message.
	maxSendBytes = 32 << 10
	// SendsPerRun caps the messages one run may send, so two sessions
	// messaging each other cannot multiply turns without bound within a
	// run.
	SendsPerRun = 5
	// maxKeyBytes bounds a sessionKey argument (events' key bound is
	// larger; a key longer than this is refused before any lookup).
	maxKeyBytes = 1024
)

// Tools returns the session tools of one run of caller (a session key).
// runID names the run in the provenance line of what it sends; lineage
// are the sessions caller is a sub-agent of, nearest first
// (subagent.Lineage), which its children's spawns carry.
func Tools(b Backend, p Policy, caller, runID string, lineage []string) (tools.List, error) {
	if b == nil {
		return nil, errors.New("sessions: no backend")
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	r := &run{b: b, p: p, caller: caller, runID: runID, lineage: lineage}
	return tools.List{listTool{r}, historyTool{r}, sendTool{r}, spawnTool{r}, yieldTool{r}}, nil
}

// run is what one run's session tools share.
type run struct {
	b      Backend
	p      Policy
	caller string
	runID  string
	// lineage are caller's ancestors (Tools).
	lineage []string
	sent    atomic.Int32
	// spawned counts the children this run spawned (Policy.MaxChildren).
	spawned atomic.Int32
}

// target reads and checks the sessionKey argument.
func (r *run) target(args map[string]any) (string, error) {
	key, _, err := toolargs.String(args, "sessionKey", true)
	if err != nil {
		return "", err
	}
	key = strings.TrimSpace(key)
	switch {
	case key == "":
		return "", errors.New("sessionKey is empty: give a session key as sessions_list shows it")
	case len(key) > maxKeyBytes:
		return "", fmt.Errorf("sessionKey is %d bytes, longer than any session key here (%d)", len(key), maxKeyBytes)
	case !utf8.ValidString(key) || strings.ContainsAny(key, "\x00\r\n"):
		return "", errors.New("sessionKey has invalid characters")
	case !r.p.Allows(r.caller, key):
		return "", fmt.Errorf("session %.100q is out of reach: this session's tools reach only sessions of its own %s (the operator's --session-tools policy)", key, r.scopeName())
	}
	return key, nil
}

func (r *run) scopeName() string {
	if r.p.Scope == ScopeAgent {
		return "tenant and agent"
	}
	return "tenant"
}

func limitArg(args map[string]any, key string, def, most int64) (int64, error) {
	v, ok, err := toolargs.Int(args, key)
	switch {
	case err != nil:
		return 0, err
	case !ok:
		return def, nil
	case v < 1:
		return 0, fmt.Errorf("%s must be 1 to %d, got %d", key, most, v)
	}
	return min(v, most), nil
}

type listTool struct{ r *run }

func (listTool) Idempotent() bool { return true }

func (t listTool) Spec() provider.Tool {
	return provider.Tool{
		Name: "sessions_list",
		Description: "List the other sessions you may reach (those of your own " + t.r.scopeName() + "), most recently active first, with whether a turn runs now. " +
			"Read one with sessions_history, message one with sessions_send.",
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"limit":         map[string]any{"type": "number", "description": fmt.Sprintf("Most sessions (default %d, max %d)", defaultListLimit, maxListLimit)},
				"activeMinutes": map[string]any{"type": "number", "description": "Only sessions active within this many minutes"},
			},
		},
	}
}

func (t listTool) Call(ctx context.Context, c tools.Call) (tools.Result, error) {
	limit, err := limitArg(c.Args, "limit", defaultListLimit, maxListLimit)
	if err != nil {
		return tools.Result{}, err
	}
	active, hasActive, err := toolargs.Number(c.Args, "activeMinutes")
	if err != nil {
		return tools.Result{}, err
	}
	if hasActive && active <= 0 {
		return tools.Result{}, fmt.Errorf("activeMinutes must be positive, got %v", active)
	}
	prefixes, keys := t.r.p.Prefixes(t.r.caller)
	// Ask for more than the limit: Allows may still leave some out.
	list, err := t.r.b.List(ctx, prefixes, keys, int(min(limit*2, maxListLimit*2)))
	if err != nil {
		return tools.Result{}, fmt.Errorf("sessions cannot be listed now: %v", err)
	}
	now := time.Now()
	var lines []string
	rows := []any{}
	for _, s := range list {
		if int64(len(rows)) >= limit {
			break
		}
		if !t.r.p.Allows(t.r.caller, s.Key) {
			continue
		}
		if hasActive && (s.LastActivity.IsZero() || now.Sub(s.LastActivity) > time.Duration(active*float64(time.Minute))) {
			continue
		}
		state := "idle"
		if s.Running {
			state = "running"
		}
		line := fmt.Sprintf("%s  %s", s.Key, state)
		if s.Key == t.r.caller {
			line += "  (this session)"
		}
		row := map[string]any{"key": s.Key, "running": s.Running, "runs": int64(s.Runs)}
		if !s.LastActivity.IsZero() {
			line += "  last active " + s.LastActivity.UTC().Format(time.RFC3339)
			row["lastActivity"] = s.LastActivity.UnixMilli()
		}
		lines = append(lines, line)
		rows = append(rows, row)
	}
	text := strings.Join(lines, "\n")
	if text == "" {
		text = "No sessions you may reach have recent activity."
	}
	return tools.Result{Content: []message.Block{message.Text(text)}, Details: map[string]any{"sessions": rows}}, nil
}

type historyTool struct{ r *run }

func (historyTool) Idempotent() bool { return true }

func (t historyTool) Spec() provider.Tool {
	return provider.Tool{
		Name: "sessions_history",
		Description: fmt.Sprintf("Read the last messages of a session you may reach (see sessions_list): user and assistant text, oldest first; tool calls and results only with includeTools. "+
			"At most %d messages, each cut at %d characters; thinking is left out. "+
			"When a bound leaves older messages out, the answer starts with a note giving a before value: pass it to read the messages before those.", maxHistoryLimit, messageChars),
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"sessionKey":   map[string]any{"type": "string", "description": "The session's key"},
				"limit":        map[string]any{"type": "number", "description": fmt.Sprintf("Last messages (default %d, max %d)", defaultHistoryLimit, maxHistoryLimit)},
				"includeTools": map[string]any{"type": "boolean", "description": "Include tool calls and results"},
				"before":       map[string]any{"type": "string", "description": "Read the messages before this point: the before value an earlier answer's note gave"},
			},
			"required": []any{"sessionKey"},
		},
	}
}

// cursor is a point in a transcript a history reads back from: the
// entries of turn before entry (none when entry is 0), then the turns
// before it. Written "<turn>" or "<turn>:<entry>".
type cursor struct {
	turn  uint64
	entry int
}

func (c cursor) String() string {
	if c.entry == 0 {
		return strconv.FormatUint(c.turn, 10)
	}
	return fmt.Sprintf("%d:%d", c.turn, c.entry)
}

// parseCursor reads a before argument ("" = none).
func parseCursor(s string) (c cursor, ok bool, err error) {
	if s = strings.TrimSpace(s); s == "" {
		return cursor{}, false, nil
	}
	turn, entry, cut := strings.Cut(s, ":")
	c.turn, err = strconv.ParseUint(turn, 10, 64)
	if err == nil && cut {
		c.entry, err = strconv.Atoi(entry)
		if err == nil && c.entry < 0 {
			err = errors.New("negative entry")
		}
	}
	if err != nil {
		return cursor{}, false, fmt.Errorf("before %.40q is not a before value an earlier answer gave (want <turn> or <turn>:<entry>)", s)
	}
	return c, true, nil
}

// shown is a message of a history and where it stands.
type shown struct {
	text string
	at   cursor // its turn and its entry's index
}

func (t historyTool) Call(ctx context.Context, c tools.Call) (tools.Result, error) {
	key, err := t.r.target(c.Args)
	if err != nil {
		return tools.Result{}, err
	}
	limit, err := limitArg(c.Args, "limit", defaultHistoryLimit, maxHistoryLimit)
	if err != nil {
		return tools.Result{}, err
	}
	withTools, err := toolargs.Bool(c.Args, "includeTools")
	if err != nil {
		return tools.Result{}, err
	}
	beforeArg, _, err := toolargs.String(c.Args, "before", false)
	if err != nil {
		return tools.Result{}, err
	}
	from, paged, err := parseCursor(beforeArg)
	if err != nil {
		return tools.Result{}, err
	}
	q := HistoryQuery{MaxTurns: historyReadTurns, MaxBytes: historyReadBytes}
	if paged {
		q.Before = from.turn
		if from.entry > 0 && from.turn < math.MaxUint64 {
			q.Before++ // the turn itself, up to the entry
		}
		if q.Before == 0 {
			return tools.Result{Content: []message.Block{message.Text(fmt.Sprintf("Session %s has no messages before %s.", key, from))},
				Details: map[string]any{"sessionKey": key, "messages": int64(0), "droppedMessages": int64(0)}}, nil
		}
	}
	var (
		msgs    []shown // newest first
		stopped bool    // by the limit, not a bound of the read
	)
	read, err := t.r.b.History(ctx, key, q, func(turn uint64, entries []message.Entry) bool {
		end := len(entries)
		if paged && turn == from.turn && from.entry > 0 {
			end = min(end, from.entry)
		}
		for i := end - 1; i >= 0; i-- {
			if int64(len(msgs)) >= limit {
				stopped = true
				return false
			}
			if s := render(entries[i].Message, withTools); s != "" {
				msgs = append(msgs, shown{s, cursor{turn, i}})
			}
		}
		stopped = int64(len(msgs)) >= limit
		return !stopped
	})
	if err != nil {
		return tools.Result{}, fmt.Errorf("the history of %.100q cannot be read now: %v", key, err)
	}
	// Keep within historyBytes from the newest.
	size, kept := 0, 0
	for _, m := range msgs {
		if size+len(m.text) > historyBytes && kept > 0 {
			break
		}
		size += len(m.text) + 2
		kept++
	}
	dropped := len(msgs) - kept
	msgs = msgs[:kept]
	texts := make([]string, len(msgs))
	for i, m := range msgs {
		texts[len(msgs)-1-i] = m.text
	}
	text := strings.Join(texts, "\n\n")
	switch {
	case text != "":
	case read.More:
		text = fmt.Sprintf("Session %s has no messages in the turns read.", key)
	case paged:
		text = fmt.Sprintf("Session %s has no messages before %s.", key, from)
	default:
		text = fmt.Sprintf("Session %s has no messages yet.", key)
	}
	details := map[string]any{"sessionKey": key, "messages": int64(len(msgs)), "droppedMessages": int64(dropped)}
	// Where older messages go on: before the oldest shown when the limit
	// or the text's cap stopped the history, else where the read stopped.
	var next cursor
	switch {
	case dropped > 0 || stopped:
		next = msgs[len(msgs)-1].at
	case read.More:
		next = cursor{turn: read.Next}
	}
	more := read.More || dropped > 0 || stopped && next.entry > 0
	if more {
		details["before"] = next.String()
	}
	switch {
	case !more:
	case dropped > 0:
		text = fmt.Sprintf("[%d older messages left out: the history is capped at %s. For older messages call again with before %q.]\n\n", dropped, sizeText(historyBytes), next.String()) + text
	case !stopped:
		text = fmt.Sprintf("[Older messages were not read: one call reads at most %d turns or %s of the stored transcript. For older messages call again with before %q.]\n\n", historyReadTurns, sizeText(historyReadBytes), next.String()) + text
	}
	return tools.Result{Content: []message.Block{message.Text(text)}, Details: details}, nil
}

func sizeText(n int) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MB", n>>20)
	}
	return fmt.Sprintf("%d KB", n>>10)
}

// render is one message as history text: "role: text", or "" for one
// that shows nothing (a tool result without includeTools, thinking only).
func render(m *message.Message, withTools bool) string {
	if m == nil {
		return ""
	}
	var parts []string
	switch m.Role {
	case message.RoleToolResult:
		if !withTools {
			return ""
		}
		return cut(fmt.Sprintf("tool result (%s): %s", m.ToolName, m.Content.Text()))
	case message.RoleUser, message.RoleAssistant:
	default:
		return ""
	}
	for _, b := range m.Content.Blocks {
		switch b.Type {
		case message.BlockText:
			if t := strings.TrimSpace(b.Text); t != "" {
				parts = append(parts, t)
			}
		case message.BlockToolCall:
			if withTools {
				parts = append(parts, fmt.Sprintf("[tool call %s]", b.Name))
			}
		case message.BlockImage:
			parts = append(parts, "[image]")
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return cut(string(m.Role) + ": " + strings.Join(parts, "\n"))
}

// cut caps s at messageChars characters.
func cut(s string) string {
	if utf8.RuneCountInString(s) <= messageChars {
		return s
	}
	r := []rune(s)
	return string(r[:messageChars]) + " […cut]"
}

type sendTool struct{ r *run }

// Idempotent: a re-run sends with the same message id, which the target
// lane drops as a duplicate.
func (sendTool) Idempotent() bool { return true }

func (t sendTool) Spec() provider.Tool {
	return provider.Tool{
		Name: "sessions_send",
		Description: fmt.Sprintf("Send a message to another session you may reach (see sessions_list): it arrives as a new user message, marked as coming from this session, "+
			"and that session's agent answers it in its own turn. This does not wait for the answer: read it later with sessions_history. At most %d messages per turn.", SendsPerRun),
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"sessionKey": map[string]any{"type": "string", "description": "The session to message"},
				"message":    map[string]any{"type": "string", "description": "The message"},
			},
			"required": []any{"sessionKey", "message"},
		},
	}
}

// Provenance returns the line a sessions_send message starts with.
func Provenance(from string) string {
	return fmt.Sprintf("[Message from session %s, sent with sessions_send]", from)
}

func (t sendTool) Call(ctx context.Context, c tools.Call) (tools.Result, error) {
	key, err := t.r.target(c.Args)
	if err != nil {
		return tools.Result{}, err
	}
	if key == t.r.caller {
		return tools.Result{}, errors.New("sessions_send cannot message this session itself")
	}
	text, _, err := toolargs.String(c.Args, "message", true)
	if err != nil {
		return tools.Result{}, err
	}
	if strings.TrimSpace(text) == "" {
		return tools.Result{}, errors.New("message is empty")
	}
	if len(text) > maxSendBytes {
		return tools.Result{}, fmt.Errorf("message is %d bytes, more than %d: shorten it, or write it to a file the other session can read", len(text), maxSendBytes)
	}
	if !utf8.ValidString(text) || strings.IndexByte(text, 0) >= 0 {
		return tools.Result{}, errors.New("message has invalid characters (not UTF-8, or NUL)")
	}
	if t.r.sent.Add(1) > SendsPerRun {
		return tools.Result{}, fmt.Errorf("this turn has sent %d messages with sessions_send, the most allowed", SendsPerRun)
	}
	id := c.Key
	if id == "" {
		id = c.ID
	}
	id = "sessions_send-" + id
	runID, err := t.r.b.Send(ctx, key, Provenance(t.r.caller)+"\n\n"+text, id)
	if err != nil {
		t.r.sent.Add(-1)
		return tools.Result{}, fmt.Errorf("the message to %.100q was not sent: %v", key, err)
	}
	return tools.Result{Content: []message.Block{message.Text(fmt.Sprintf("Sent to %s (run %s). Its answer will be in sessions_history %s once that turn ends.", key, runID, key))},
		Details: map[string]any{"status": "accepted", "sessionKey": key, "runId": runID}}, nil
}
