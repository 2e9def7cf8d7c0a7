package events

import (
	"fmt"
	"strings"
)

// Subjects and stream names of the fleet.
const (
	InboundPrefix = "agent.in."  // agent.in.<lane token>
	EventPrefix   = "agent.ev."  // agent.ev.<lane token>.<run id>
	DeadPrefix    = "agent.dlq." // agent.dlq.<reason>
	// AlivePrefix is the subject a worker answers while it is connected,
	// agent.alive.<life> (kvstore.Liveness): a request that finds no
	// responder there says the worker's connection is gone.
	AlivePrefix = "agent.alive."

	InboundStream = "AGENT_IN"
	EventStream   = "AGENT_EV"
	DeadStream    = "AGENT_DLQ"
)

// Dead-letter reasons: the last token of agent.dlq.<reason>.
const (
	DeadPoison  = "poison"   // its turn started MaxAttempts times without finishing
	DeadInvalid = "invalid"  // its payload does not decode or validate
	DeadBadLane = "bad-lane" // published on a subject that is no lane's
)

// DeadReasons returns the dead-letter reasons.
func DeadReasons() []string { return []string{DeadPoison, DeadInvalid, DeadBadLane} }

// CheckDeadReason refuses a reason that is none of DeadReasons: a filter
// by a misspelt reason silently matched nothing.
func CheckDeadReason(r string) error {
	for _, known := range DeadReasons() {
		if r == known {
			return nil
		}
	}
	return fmt.Errorf("%q is not a dead-letter reason (%s)", clip(r), strings.Join(DeadReasons(), ", "))
}

// Header names used on fleet messages.
const (
	HeaderContentType = "Content-Type"
	HeaderMsgID       = "Nats-Msg-Id"
	// HeaderLaneMsgID is an inbound message's id for de-duplication on
	// its own lane (lanes/queue.IDs); unlike Nats-Msg-Id, which JetStream
	// de-duplicates stream-wide, no other session's message can use it
	// first.
	HeaderLaneMsgID = "Lanefleet-Msg-Id"
	HeaderStream    = "Lanefleet-Stream" // event stream name, e.g. "final"
	HeaderError     = "Lanefleet-Error"  // dead letters: why
	HeaderSubject   = "Lanefleet-Subject"
	HeaderSeq       = "Lanefleet-Seq"
)

// Content types.
const (
	ContentMsgpack = "application/msgpack"
	ContentJSON    = "application/json"
)

// InboundSubject returns the subject of a session's lane.
func InboundSubject(key string) (string, error) {
	tok, err := KeyToken(key)
	if err != nil {
		return "", err
	}
	return InboundPrefix + tok, nil
}

// EventSubject returns the subject of one run's events.
func EventSubject(key, run string) (string, error) {
	tok, err := KeyToken(key)
	if err != nil {
		return "", err
	}
	if !isPlain(run) {
		return "", fmt.Errorf("events: run id %q is not a subject token", clip(run))
	}
	return EventPrefix + tok + "." + run, nil
}

// LaneOf returns the lane token and session key of an inbound subject.
func LaneOf(subject string) (token, key string, err error) {
	tok, ok := strings.CutPrefix(subject, InboundPrefix)
	if !ok || tok == "" || strings.Contains(tok, ".") {
		return "", "", fmt.Errorf("%w: subject %q is not agent.in.<token>", ErrBadToken, clip(subject))
	}
	key, err = TokenKey(tok)
	if err != nil {
		return "", "", err
	}
	return tok, key, nil
}
