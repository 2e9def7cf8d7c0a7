package events

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Sub-agent lineage and completions (see package subagent for the rules).

// Parent names the session and run that spawned a sub-agent session. A
// spawn message carries it (Inbound.Parent); the child session keeps it in
// its state (SessionState.Parent) until its completion is delivered.
type Parent struct {
	Session string `json:"session" msgpack:"session"`
	Run     string `json:"run" msgpack:"run"`
	// Label is the spawn's label (for people and the parent's model).
	Label string `json:"label,omitempty" msgpack:"label,omitempty"`
	// Nonce keys the completion's message id: random per spawn, so no
	// other sender can know the id and use it first (JetStream's
	// de-duplication is stream-wide).
	Nonce string `json:"nonce,omitempty" msgpack:"nonce,omitempty"`
	// Ancestors are the spawning session's own ancestors, nearest first
	// (its parent, that one's parent, …; none for a session nobody
	// spawned): with Session, the sessions whose budgets the child's
	// model calls count against too. Sealed with the rest.
	Ancestors []string `json:"ancestors,omitempty" msgpack:"ancestors,omitempty"`
	// Delivered is set (in the child's state) by the commit whose record
	// carries the completion: no later turn of the child delivers again.
	Delivered bool `json:"delivered,omitempty" msgpack:"delivered,omitempty"`
	// Seal is the fleet's seal of the spawn (subagent.SealSpawn): only a
	// worker makes one, and a child adopts no parent without it.
	Seal string `json:"seal,omitempty" msgpack:"seal,omitempty"`
}

// Child is a sub-agent a session spawned and whose completion it has not
// received yet (SessionState.Children).
type Child struct {
	Session string `json:"session" msgpack:"session"`
	// Run is the child's first run (the spawn message's).
	Run string `json:"run" msgpack:"run"`
	// ParentRun is the parent's run that spawned it.
	ParentRun string `json:"parentRun" msgpack:"parentRun"`
	Label     string `json:"label,omitempty" msgpack:"label,omitempty"`
	// Spawned is when, Unix ms.
	Spawned int64 `json:"spawned,omitempty" msgpack:"spawned,omitempty"`
	// Stopped is set when the session was stopped while the child was
	// pending: a stop went to the child's lane too, and its completion,
	// when it comes, is taken off without a turn of the session's.
	Stopped bool `json:"stopped,omitempty" msgpack:"stopped,omitempty"`
}

// SubagentResult marks an inbound message as a sub-agent's completion
// (Inbound.Subagent): Text is what the parent's model reads.
type SubagentResult struct {
	// Session and Run name the child session and the run whose end
	// completed it.
	Session string `json:"session" msgpack:"session"`
	Run     string `json:"run" msgpack:"run"`
	Label   string `json:"label,omitempty" msgpack:"label,omitempty"`
	// Status is SubagentOK, SubagentError or SubagentStopped.
	Status string `json:"status" msgpack:"status"`
	// Usage is the child session's whole use (its own children's
	// included), which the parent adds to its running total.
	Usage *UsageMeta `json:"usage,omitempty" msgpack:"usage,omitempty"`
	// Seal is the fleet's seal of the completion (subagent.Seal): only a
	// worker makes one, and a parent runs no completion without it.
	Seal string `json:"seal,omitempty" msgpack:"seal,omitempty"`
}

// Sub-agent statuses.
const (
	SubagentOK    = "ok"
	SubagentError = "error"
	// SubagentStopped: a stop reached the child (its parent's, cascaded,
	// or its own) before it finished.
	SubagentStopped = "stopped"
)

// Bounds of lineage fields.
const (
	maxLabelBytes = 128
	maxNonceBytes = 64
	maxSealBytes  = 64
	// MaxAncestors bounds Parent.Ancestors (sub-agents nest far less
	// deep: the fleet's depth limit).
	MaxAncestors = 16
)

// Validate checks a parent lineage.
func (p *Parent) Validate() error {
	switch {
	case ValidateKey(p.Session) != nil:
		return &DecodeError{Field: "parent.session", Reason: ValidateKey(p.Session).Error()}
	case !runID(p.Run):
		return &DecodeError{Field: "parent.run", Reason: "not a run id"}
	case len(p.Label) > maxLabelBytes || !utf8.ValidString(p.Label):
		return &DecodeError{Field: "parent.label", Reason: fmt.Sprintf("not UTF-8 of at most %d bytes", maxLabelBytes)}
	case len(p.Nonce) > maxNonceBytes:
		return &DecodeError{Field: "parent.nonce", Reason: fmt.Sprintf("longer than %d bytes", maxNonceBytes)}
	case len(p.Seal) > maxSealBytes:
		return &DecodeError{Field: "parent.seal", Reason: fmt.Sprintf("longer than %d bytes", maxSealBytes)}
	case len(p.Ancestors) > MaxAncestors:
		return &DecodeError{Field: "parent.ancestors", Reason: fmt.Sprintf("more than %d", MaxAncestors)}
	}
	for _, a := range p.Ancestors {
		if err := ValidateKey(a); err != nil {
			return &DecodeError{Field: "parent.ancestors", Reason: err.Error()}
		}
	}
	return nil
}

// Validate checks a completion's marker.
func (r *SubagentResult) Validate() error {
	switch {
	case ValidateKey(r.Session) != nil:
		return &DecodeError{Field: "subagent.session", Reason: ValidateKey(r.Session).Error()}
	case !runID(r.Run):
		return &DecodeError{Field: "subagent.run", Reason: "not a run id"}
	case len(r.Label) > maxLabelBytes || !utf8.ValidString(r.Label):
		return &DecodeError{Field: "subagent.label", Reason: fmt.Sprintf("not UTF-8 of at most %d bytes", maxLabelBytes)}
	case r.Status != SubagentOK && r.Status != SubagentError && r.Status != SubagentStopped:
		return &DecodeError{Field: "subagent.status", Reason: fmt.Sprintf("%q: want ok, error or stopped", clip(r.Status))}
	case len(r.Seal) > maxSealBytes:
		return &DecodeError{Field: "subagent.seal", Reason: fmt.Sprintf("longer than %d bytes", maxSealBytes)}
	}
	return nil
}

// runID reports whether s is a run id: a positive inbound sequence in
// decimal.
func runID(s string) bool {
	n, err := strconv.ParseUint(s, 10, 64)
	return err == nil && n > 0 && len(s) <= 20
}
