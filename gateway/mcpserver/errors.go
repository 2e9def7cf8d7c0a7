package mcpserver

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
)

// toolError is what a caller is told when the fleet refused or failed a
// tool's operation: the condition in words the caller can act on, never
// the fleet's internal text (a subject, a bucket), which goes to the log
// when no condition matched.
func (s *Server) toolError(err error) error {
	var de *events.DecodeError
	switch {
	case errors.As(err, &de):
		return errors.New(de.Detail())
	case errors.Is(err, lanefleet.ErrLaneFull):
		return errors.New("the session has as many messages queued as the fleet lets one session queue; send again once its runs have taken some")
	case errors.Is(err, lanefleet.ErrTooLarge), errors.Is(err, events.ErrTooLarge):
		return errors.New("the message is larger than the fleet accepts")
	case errors.Is(err, lanefleet.ErrUnknownRun):
		return errors.New("the session has no such run (a wrong id, or its events expired)")
	case errors.Is(err, lanefleet.ErrUnacknowledged):
		return errors.New("the message went out but its acknowledgement did not come back: send it again with the same messageId, never as a new message")
	case errors.Is(err, lanefleet.ErrPermission):
		return errors.New("this server's NATS user may not do this (listing sessions takes the admin role; a session's messages and history its sender role): see docs/security.md")
	case errors.Is(err, lanefleet.ErrNoFleet), errors.Is(err, nats.ErrNoResponders):
		return errors.New("no worker answers: start a worker first")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return errors.New("the fleet did not answer in time")
	case errors.Is(err, context.Canceled):
		return errors.New("the call was cancelled")
	}
	s.log.Warn().Err(err).Msg("mcpserver: fleet request failed")
	return errors.New("the fleet could not do this; the server's log says why")
}
