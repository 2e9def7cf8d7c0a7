// Package reply is the one place a fleet process answers a NATS request.
//
// NATS does not check a request's reply subject against the requester's
// permissions, and a responder publishes its answer with its own identity:
// a viewer that may only request agent.svc.<lane>.history could name
// $JS.API.STREAM.DELETE.AGENT_IN as the reply subject, and a worker that
// answered it (an error reply has an empty body, a complete JetStream API
// request) would delete the stream. NATS's allow_responses lets a responder
// publish to any reply subject it was handed, past its publish denies, so a
// separate service identity does not help either.
//
// So every service endpoint of the fleet (the lane and admin services the
// workers serve, remote tools, run hooks) takes its requests through
// [Handler], which answers only reply subjects in an inbox namespace
// (_INBOX.… and the per-user _INBOX_<user>.… prefixes of the permission
// model) and drops and logs every other request before its handler runs:
// nothing is done for it and nothing is sent. The request a handler gets
// carries a checked [To] instead of the raw reply subject, and [Guard.Send]
// is the only way to answer; a test of this package fails on any function
// outside it that takes a micro.Request, so a new service cannot forget.
package reply

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"
)

// MaxSubject bounds a reply subject, in bytes: an inbox is a prefix and a
// couple of random tokens, far below it.
const MaxSubject = 256

// The inbox namespaces a reply may go to: nats.go's default inbox prefix
// and the per-user prefix of the permission model (_INBOX_<user>).
const (
	inboxPrefix = "_INBOX."
	userPrefix  = "_INBOX_"
)

// ErrNotInbox is Check's error for a reply subject outside the inbox
// namespaces.
var ErrNotInbox = errors.New("reply: the reply subject is not an inbox (_INBOX.… or _INBOX_<user>.…)")

// Check returns nil when subject is an inbox a request may be answered on:
// _INBOX.<token>… or _INBOX_<user>.<token>…, every token non-empty and free
// of wildcards, whitespace and control bytes, at most MaxSubject bytes. It
// returns an error wrapping ErrNotInbox otherwise (the empty subject
// included: see Handler for requests without a reply).
func Check(subject string) error {
	if len(subject) > MaxSubject {
		return fmt.Errorf("%w: %d bytes, over %d", ErrNotInbox, len(subject), MaxSubject)
	}
	first, rest, ok := strings.Cut(subject, ".")
	switch {
	case !ok || rest == "":
		return ErrNotInbox
	case first+"." == inboxPrefix:
	case strings.HasPrefix(first, userPrefix) && len(first) > len(userPrefix):
	default:
		return ErrNotInbox
	}
	for tok := range strings.SplitSeq(subject, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return ErrNotInbox
		}
		for i := 0; i < len(tok); i++ {
			if c := tok[i]; c <= ' ' || c == 0x7f {
				return ErrNotInbox
			}
		}
	}
	return nil
}

// To is a checked reply subject: an inbox, or none (a publish that
// expects no answer). Only Handler makes one.
type To struct{ subject string }

// None reports whether the request has nobody to answer.
func (t To) None() bool { return t.subject == "" }

// Request is a request as a handler sees it: its subject, body and headers,
// and where its answer goes.
type Request struct {
	Subject string
	Data    []byte
	Headers nats.Header
	To      To
}

// Guard answers the requests of one service.
type Guard struct {
	NC      *nats.Conn
	Log     zerolog.Logger
	Service string // in log lines ("lane service")

	refused atomic.Int64
}

// Refused returns how many requests the guard dropped for their reply
// subject.
func (g *Guard) Refused() int64 { return g.refused.Load() }

// Handler returns a micro handler that hands h each request whose reply
// subject is an inbox or empty, and drops every other one with one warning
// in the log (the endpoint, the request's subject and the refused reply
// subject, clipped): h does not run for it and nothing is sent. h runs on
// micro's subscription goroutine, as any micro handler does.
func (g *Guard) Handler(endpoint string, h func(*Request)) micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) {
		g.take(endpoint, req.Subject(), req.Reply(), req.Data(), nats.Header(req.Headers()), h)
	})
}

// MsgHandler is Handler for a core subscription (one that is not a micro
// endpoint, such as a worker's liveness subject): the same checks, the
// same refusal.
func (g *Guard) MsgHandler(endpoint string, h func(*Request)) nats.MsgHandler {
	return func(m *nats.Msg) { g.take(endpoint, m.Subject, m.Reply, m.Data, m.Header, h) }
}

// take hands h a request whose reply subject is an inbox or empty, and
// drops and logs any other.
func (g *Guard) take(endpoint, subject, to string, data []byte, hdr nats.Header, h func(*Request)) {
	if to != "" {
		if err := Check(to); err != nil {
			g.refused.Add(1)
			g.Log.Warn().Str("service", g.Service).Str("endpoint", endpoint).Str("subject", clip(subject)).
				Str("reply", clip(to)).Msg(g.Service + ": refused a request whose reply subject is not an inbox (nothing done, nothing sent)")
			return
		}
	}
	h(&Request{Subject: subject, Data: data, Headers: hdr, To: To{subject: to}})
}

// Send publishes m to t (m.Subject is set to it); without a subject it
// sends nothing and returns nil.
func (g *Guard) Send(t To, m *nats.Msg) error {
	if t.subject == "" {
		return nil
	}
	// To values come only from Handler, which checked them; a zero-value
	// Guard or a hand-built To cannot get past this second look.
	if err := Check(t.subject); err != nil {
		return err
	}
	m.Subject = t.subject
	return g.NC.PublishMsg(m)
}

// clip bounds a subject in a log line.
func clip(s string) string {
	const max = 128
	if len(s) <= max {
		return s
	}
	return strings.ToValidUTF8(s[:max], "") + "…"
}
