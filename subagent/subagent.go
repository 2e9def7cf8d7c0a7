// Package subagent holds the rules of sub-agents (sessions_spawn): the
// child session's key and depth, the limits, the completion a child
// delivers to its parent's lane (its text, its de-duplication id), and how
// a session's state records its pending children and rolls their cost up.
// It is pure: the lanes deliver completions, tools/sessions spawns.
//
// A child is a session of its own, keyed under its parent's key (so in
// its tenant): <parent>:subagent:<id>, or, for another agent of an
// agent-form key, agent:<target>:<rest>:subagent:<id>. Its depth is the
// number of ":subagent:" segments of its key, which no sender can lower.
//
// Files: subagent.go (keys, limits, completions, state), seal.go (the
// fleet's seals on spawns and completions).
package subagent

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/agents"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
)

// Limits' defaults (the reference's: depth 2, 5 children).
const (
	// MaxDepthDefault is how deep sub-agents nest: a session of depth
	// MaxDepth spawns none.
	MaxDepthDefault = 2
	// MaxChildrenDefault is how many children one run of a session may
	// spawn.
	MaxChildrenDefault = 5
	// MaxResultBytes bounds the child's reply text in a completion.
	MaxResultBytes = 16 << 10
)

// segment separates a child's id from its parent's key.
const segment = ":subagent:"

// ToolSpawn is the name of the spawn tool, whose results Spawned reads.
const ToolSpawn = "sessions_spawn"

// Depth is the depth of a session: 0 for one nobody spawned.
func Depth(key string) int { return strings.Count(key, segment) }

// ID is a child's id: stable for one call of the spawn tool (parent key
// and the call's idempotency key), so a spawn the parent's turn makes again
// after a crash names the same child.
func ID(parent, callKey string) string {
	h := sha256.Sum256([]byte(parent + "\x00" + callKey))
	return hex.EncodeToString(h[:8])
}

// ErrKey is returned for a child key that cannot be made.
var ErrKey = errors.New("subagent: no child key")

// ChildKey is the key of parent's child id running agent target ("" =
// the parent's own agent).
func ChildKey(parent, target, id string) (string, error) {
	own, named := agents.Of(parent, "")
	var key string
	switch {
	case target == "" || target == own:
		key = parent + segment + id
	case named:
		rest := strings.TrimPrefix(parent, "agent:"+own+":")
		key = "agent:" + target + ":" + rest + segment + id
	default:
		return "", fmt.Errorf("%w: this session's key names no agent, so its sub-agents run its own agent only", ErrKey)
	}
	if err := events.ValidateKey(key); err != nil {
		return "", fmt.Errorf("%w: %v (this session's key is too long to nest under)", ErrKey, err)
	}
	return key, nil
}

// MsgID is the message id of the completion of child's run: keyed by the
// fleet's key and the spawn's nonce, so no sender can know it (and take
// it first: the stream's de-duplication is stream-wide).
func MsgID(key []byte, nonce, child, run string) string {
	s := newSealer(key, "completion-id")
	for _, v := range []string{nonce, child, run} {
		s.str(v)
	}
	return "subagent-" + s.sum()[:32]
}

// Completion is what a child session delivers when a turn of it commits:
// the parent's key, the message's id, and the message, when st (the
// child's state after the turn) names a parent not delivered to yet and
// no child of its own is pending (a session waiting for its own children
// completes when the last of them has answered). st.Parent is then marked
// Delivered by the caller, in the same record. ok is false when nothing is
// owed. stopped says a stop ended the child (its status is then
// SubagentStopped, whatever the turn's result). The message carries the
// seal of key, the fleet's.
func Completion(key []byte, child, run string, st *events.SessionState, res *events.Result, stopped bool) (parent, id string, in *events.Inbound, ok bool) {
	if st == nil || st.Parent == nil || st.Parent.Delivered || len(st.Children) > 0 || res == nil {
		return "", "", nil, false
	}
	p := st.Parent
	r := &events.SubagentResult{Session: child, Run: run, Label: p.Label, Status: events.SubagentOK, Usage: st.Usage}
	var body string
	if stopped {
		r.Status = events.SubagentStopped
		body = "It was stopped before it finished (a stop reached its session: its parent's, passed on, or its own)."
	} else if res.Meta.Error != nil {
		r.Status = events.SubagentError
		body = fmt.Sprintf("It failed (%s): %s", res.Meta.Error.Kind, res.ErrorText())
	} else {
		var parts []string
		for _, pl := range res.Payloads {
			if t := strings.TrimSpace(pl.Text); t != "" && !pl.IsError {
				parts = append(parts, t)
			}
		}
		body = strings.Join(parts, "\n\n")
		if body == "" {
			body = "(It ended without a reply.)"
		}
	}
	id = MsgID(key, p.Nonce, child, run)
	in = &events.Inbound{ID: id, Text: Text(r, body), Mode: "followup", Subagent: r}
	r.Seal = seal(key, p.Session, in)
	return p.Session, id, in, true
}

// Text is a completion as the parent's model reads it: a header that says
// it is a sub-agent's result, not the user's words, then the child's reply
// (cut at MaxResultBytes).
func Text(r *events.SubagentResult, body string) string {
	if len(body) > MaxResultBytes {
		cut := MaxResultBytes
		for cut > 0 && !utf8.RuneStart(body[cut]) {
			cut--
		}
		body = body[:cut] + " […cut]"
	}
	status := "completed"
	switch r.Status {
	case events.SubagentError:
		status = "failed"
	case events.SubagentStopped:
		status = "was stopped"
	}
	label := ""
	if r.Label != "" {
		label = fmt.Sprintf(" %q", r.Label)
	}
	return fmt.Sprintf("[Sub-agent result: this is not the user speaking. Your sub-agent%s (session %s, run %s) %s. "+
		"Use it for your task; answer the user in your own words.]\n\n%s", label, r.Session, r.Run, status, body)
}

// Stop marks every pending child of st not stopped yet as stopped (the
// session's stop is passed on to them) and returns those it marked; st's
// children are copied before the change.
func Stop(st *events.SessionState) []events.Child {
	var out []events.Child
	for i, c := range st.Children {
		if c.Stopped {
			continue
		}
		if out == nil {
			st.Children = slices.Clone(st.Children)
		}
		st.Children[i].Stopped = true
		out = append(out, st.Children[i])
	}
	return out
}

// StopID is the message id of the stop a session's stop run passes on to
// its child: keyed by the fleet's key (no sender can know it, and take it
// first), the same for every publish of that stop.
func StopID(key []byte, parent, run, child string) string {
	s := newSealer(key, "stop-id")
	for _, v := range []string{parent, run, child} {
		s.str(v)
	}
	return "substop-" + s.sum()[:32]
}

// StoppedChild reports whether in is the completion of a child st has
// marked stopped (Stop): it is taken off without a turn, and its child
// returned.
func StoppedChild(st *events.SessionState, in *events.Inbound) (events.Child, bool) {
	if st == nil || in == nil || in.Subagent == nil {
		return events.Child{}, false
	}
	i := slices.IndexFunc(st.Children, func(c events.Child) bool { return c.Session == in.Subagent.Session })
	if i < 0 || !st.Children[i].Stopped {
		return events.Child{}, false
	}
	return st.Children[i], true
}

// StoppedText is the reply of the run that takes the completion of a
// stopped child off (StoppedChild).
func StoppedText(c events.Child) string {
	label := ""
	if c.Label != "" {
		label = fmt.Sprintf(" %q", c.Label)
	}
	return fmt.Sprintf("Sub-agent%s (session %s) ended after this session was stopped: its result was not answered (its use counts).", label, c.Session)
}

// Adopt records in child's state the parent its spawn message names (the
// first one only; a later spawn message to the same session is answered as
// a prompt and changes nothing). The caller has checked the spawn's seal.
// It reports whether st changed.
func Adopt(st *events.SessionState, in *events.Inbound) bool {
	if in == nil || in.Parent == nil || st.Parent != nil {
		return false
	}
	p := *in.Parent
	p.Delivered, p.Seal = false, ""
	st.Parent = &p
	return true
}

// Lineage is the sessions a session whose parent is p was spawned under,
// nearest first: p's session, then its own ancestors (nil for p nil: a
// session nobody spawned). Each one's budget counts the session's model
// calls too, and a child the session spawns carries them in its spawn
// (Parent.Ancestors). p must be one the fleet sealed (the session's
// adopted parent, or its sealed spawn message's).
func Lineage(p *events.Parent) []string {
	if p == nil {
		return nil
	}
	out := make([]string, 0, 1+len(p.Ancestors))
	return append(append(out, p.Session), p.Ancestors...)
}

// Pending reports whether child is one of st's pending children.
func Pending(st *events.SessionState, child string) bool {
	return st != nil && slices.ContainsFunc(st.Children, func(c events.Child) bool { return c.Session == child })
}

// Received takes the completion r off st's pending children and adds the
// child's use to the running totals (the roll-up: once, at delivery, from
// the child's whole use). It reports false, changing nothing, when r's
// child is not pending.
func Received(st *events.SessionState, r *events.SubagentResult) bool {
	i := slices.IndexFunc(st.Children, func(c events.Child) bool { return c.Session == r.Session })
	if i < 0 {
		return false
	}
	st.Children = slices.Delete(slices.Clone(st.Children), i, i+1)
	if len(st.Children) == 0 {
		st.Children = nil
	}
	if r.Usage != nil {
		st.Usage = st.Usage.Plus(r.Usage)
		st.ChildUsage = st.ChildUsage.Plus(r.Usage)
	}
	return true
}

// Add adds spawned children to st's pending ones (a child already there
// is not added twice).
func Add(st *events.SessionState, spawned []events.Child) {
	for _, c := range spawned {
		if !Pending(st, c.Session) {
			st.Children = append(slices.Clip(st.Children), c)
		}
	}
}

// Spawned returns the children a turn's entries spawned: the accepted
// results of its sessions_spawn calls (their details name the child),
// live or replayed from the step journal alike.
func Spawned(entries []message.Entry, parentRun string, now int64) []events.Child {
	var out []events.Child
	for _, e := range entries {
		m := e.Message
		if m == nil || m.Role != message.RoleToolResult || m.ToolName != ToolSpawn || m.IsError {
			continue
		}
		d, ok := m.Details.(map[string]any)
		if !ok || d["status"] != "accepted" {
			continue
		}
		key, _ := d["childSessionKey"].(string)
		run, _ := d["runId"].(string)
		label, _ := d["label"].(string)
		if events.ValidateKey(key) != nil || run == "" {
			continue
		}
		out = append(out, events.Child{Session: key, Run: run, ParentRun: parentRun, Label: label, Spawned: now})
	}
	return out
}
