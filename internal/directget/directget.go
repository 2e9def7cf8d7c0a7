// Package directget reads many stored messages of a JetStream stream in
// one request, by Direct Get: a batch (the messages from a sequence on,
// those of a subject filter only when one is given) or a multi-last get
// (the last message of each subject some filters match). The server
// answers inline, without the JetStream API's queue and JSON, with the
// messages one by one and then an end-of-batch status. A stream answers
// only with AllowDirect set.
package directget

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Request is a Direct Get request (the server's JSApiMsgGetRequest).
type Request struct {
	// Seq is the first sequence read (a batch), or the lowest one a
	// multi-last get returns.
	Seq uint64 `json:"seq,omitempty"`
	// Batch is the most messages returned.
	Batch int `json:"batch,omitempty"`
	// NextFor filters a batch by subject.
	NextFor string `json:"next_by_subj,omitempty"`
	// MultiLast asks for the last message of every subject these
	// filters (wildcards allowed) match, in sequence order: at most
	// MultiLastMax subjects, else ErrTooMany.
	MultiLast []string `json:"multi_last,omitempty"`
	// MaxBytes stops the answer after about this many bytes (0: the
	// server's limit of what a client may have pending); Reply.Pending
	// then says what was left.
	MaxBytes int `json:"max_bytes,omitempty"`
	// Meta keeps of each message its sequence, subject and time only:
	// its headers and data are dropped as it is read, so an answer of
	// many large messages (a lane's newest message may be a MiB) is not
	// held whole by a reader that only wants to know where they are.
	Meta bool `json:"-"`
}

// what names what req asks, for its errors: the last messages of its
// filters (the first, and how many more), or a batch (of a subject) from
// its sequence.
func (req *Request) what() string {
	switch {
	case len(req.MultiLast) > 0:
		s := "the last of " + req.MultiLast[0]
		if n := len(req.MultiLast) - 1; n > 0 {
			s += fmt.Sprintf(" and %d more filters", n)
		}
		if req.Seq > 0 {
			s += fmt.Sprintf(" from %d", req.Seq)
		}
		return s
	case req.NextFor != "":
		return fmt.Sprintf("%s from %d", req.NextFor, req.Seq)
	}
	return fmt.Sprintf("from %d", req.Seq)
}

// MultiLastMax is the most subjects a multi-last get answers for (the
// server's limit).
const MultiLastMax = 1024

// Msg is one stored message of an answer.
type Msg struct {
	Seq     uint64
	Subject string
	Time    time.Time
	Header  nats.Header // as stored, with the server's Nats-* headers added
	Data    []byte
}

// Reply is an answer.
type Reply struct {
	Msgs []Msg
	// Pending is what the end-of-batch status says is left: messages
	// of a batch after its last, subjects of a multi-last get not
	// returned (Batch or MaxBytes stopped it).
	Pending uint64
}

// ErrTooMany is a multi-last get whose filters match more than
// MultiLastMax subjects: nothing was returned.
var ErrTooMany = errors.New("directget: the filters match too many subjects")

// ErrNotServed is a request no server answered: the stream does not
// allow Direct Get (AllowDirect off: a replicated stream of ours, or one
// an operator or an older version made) or does not exist. Nothing was
// read; a reader falls back to reads through the JetStream API.
var ErrNotServed = errors.New("the stream answers no Direct Get (AllowDirect off, or no such stream)")

// numPendingHeader says, on the end of an answer, what it left.
const numPendingHeader = "Nats-Num-Pending"

// wait bounds the wait for each next message of an answer when the
// context has no sooner deadline.
const wait = 5 * time.Second

// errIdle ends a wait for the next message of an answer after wait.
var errIdle = errors.New("directget: no message within the wait")

// Subject is the Direct Get subject of stream under js's API prefix.
func Subject(js jetstream.JetStream, stream string) string {
	api := js.Options().APIPrefix
	if api == "" {
		api = jetstream.DefaultAPIPrefix
	}
	return api + "DIRECT.GET." + stream
}

// Get sends req to subject (Subject) and reads its answer: the messages
// (none when nothing matches) up to the end of the batch. An answer of
// more than most messages (0: any number) is an error.
func Get(ctx context.Context, nc *nats.Conn, subject string, req Request, most int) (Reply, error) {
	var rep Reply
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("directget: %w", err)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return rep, fmt.Errorf("directget: %w", err)
	}
	// An inbox of its own: one under the connection's request mux
	// (NewRespInbox) matches the mux's wildcard subscription too, and the
	// server sends a subscriber's every match: each answer came twice.
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return rep, fmt.Errorf("directget: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, body); err != nil {
		return rep, fmt.Errorf("directget: %w", err)
	}
	// The wait for each next message ends with ctx, or after wait
	// without one: the idle timer, started anew on each message.
	var (
		wctx   context.Context
		cancel context.CancelCauseFunc
		idle   *time.Timer
	)
	start := func() {
		wctx, cancel = context.WithCancelCause(ctx)
		c := cancel
		idle = time.AfterFunc(wait, func() { c(errIdle) })
	}
	start()
	defer func() {
		idle.Stop()
		cancel(nil)
	}()
	for {
		m, err := sub.NextMsgWithContext(wctx)
		if err != nil {
			if ctx.Err() != nil {
				return rep, fmt.Errorf("directget: %w", ctx.Err())
			}
			switch {
			case errors.Is(err, nats.ErrNoResponders):
				return rep, fmt.Errorf("directget: %s %s: %w: %w", subject, req.what(), ErrNotServed, err)
			case errors.Is(context.Cause(wctx), errIdle):
				err = nats.ErrTimeout
			}
			return rep, fmt.Errorf("directget: %s %s: %w", subject, req.what(), err)
		}
		if idle.Stop() {
			idle.Reset(wait)
		} else {
			// It ran out as this message came: a fresh wait.
			cancel(nil)
			start()
		}
		switch status := m.Header.Get("Status"); status {
		case "":
		case "204": // end of batch
			pending, err := strconv.ParseUint(m.Header.Get(numPendingHeader), 10, 64)
			if err != nil || (pending > 0 && len(rep.Msgs) == 0) {
				// Read as nothing left, it would end a listing early;
				// with nothing sent, a reader going on from the last
				// message would ask again from where it stood.
				return rep, fmt.Errorf("directget: %s %s: an end of batch of %d messages with %q pending", subject, req.what(), len(rep.Msgs), m.Header.Get(numPendingHeader))
			}
			rep.Pending = pending
			return rep, nil
		case "404": // nothing matches
			if len(req.MultiLast) > 0 && m.Header.Get("Description") != "No Results" {
				// A multi-last get says "No Results" for none; its other
				// 404 is a message it found and failed to load, which,
				// read as none, would show a lane without its lease or
				// run.
				return rep, fmt.Errorf("directget: %s %s: status 404 %s", subject, req.what(), m.Header.Get("Description"))
			}
			return rep, nil
		case "413":
			return rep, ErrTooMany
		case "503": // no responders
			return rep, fmt.Errorf("directget: %s %s: %w: %w", subject, req.what(), ErrNotServed, nats.ErrNoResponders)
		default:
			return rep, fmt.Errorf("directget: %s %s: status %s %s", subject, req.what(), status, m.Header.Get("Description"))
		}
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			return rep, fmt.Errorf("directget: %s %s: a message without its sequence", subject, req.what())
		}
		if seq < req.Seq || (len(rep.Msgs) > 0 && seq <= rep.Msgs[len(rep.Msgs)-1].Seq) {
			// The server answers in rising sequence order from req.Seq:
			// a reader going on from the last message (Last, a batch's
			// next) would otherwise read the same messages again, or
			// forever.
			return rep, fmt.Errorf("directget: %s %s: message %d out of order", subject, req.what(), seq)
		}
		at, err := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
		subj := m.Header.Get(jetstream.SubjectHeader)
		if err != nil || subj == "" {
			// Read as the zero time or no subject, it would list a
			// year-1 activity, or a subject's message as none.
			return rep, fmt.Errorf("directget: %s %s: message %d without its subject or time", subject, req.what(), seq)
		}
		msg := Msg{Seq: seq, Subject: subj, Time: at}
		if !req.Meta {
			msg.Header, msg.Data = m.Header, m.Data
		}
		rep.Msgs = append(rep.Msgs, msg)
		if most > 0 && len(rep.Msgs) > most {
			return rep, fmt.Errorf("directget: %s %s: more than %d messages", subject, req.what(), most)
		}
	}
}

// Last returns the last message of every subject req.MultiLast's filters
// match, however many, each subject once: filters matching more than
// MultiLastMax subjects are asked in halves, and an answer cut short by
// its size goes on from its last sequence (req's Seq and Batch are not
// used; its MaxBytes and Meta are each part's). A single filter that
// matches more than MultiLastMax subjects is ErrTooMany. A subject that
// two parts name (a newer message stored between them, or filters of two
// halves that both match it) is returned with the higher sequence.
func Last(ctx context.Context, nc *nats.Conn, subject string, req Request) ([]Msg, error) {
	msgs, err := last(ctx, nc, subject, req)
	if err != nil {
		return nil, err
	}
	return newest(msgs), nil
}

// newest keeps each subject's message of the highest sequence, in the
// order the subjects first came (in place).
func newest(msgs []Msg) []Msg {
	at := make(map[string]int, len(msgs))
	out := msgs[:0]
	for _, m := range msgs {
		if i, ok := at[m.Subject]; ok {
			if m.Seq > out[i].Seq {
				out[i] = m
			}
			continue
		}
		at[m.Subject] = len(out)
		out = append(out, m)
	}
	return out
}

// last is Last without its subjects made unique.
func last(ctx context.Context, nc *nats.Conn, subject string, req Request) ([]Msg, error) {
	filters := req.MultiLast
	if len(filters) == 0 {
		return nil, nil
	}
	req.Batch = 0
	var out []Msg
	for req.Seq = 0; ; {
		rep, err := Get(ctx, nc, subject, req, MultiLastMax)
		if errors.Is(err, ErrTooMany) && len(filters) > 1 {
			half := len(filters) / 2
			a, err := last(ctx, nc, subject, with(req, filters[:half]))
			if err != nil {
				return nil, err
			}
			b, err := last(ctx, nc, subject, with(req, filters[half:]))
			if err != nil {
				return nil, err
			}
			return append(append(out, a...), b...), nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, rep.Msgs...)
		if rep.Pending == 0 || len(rep.Msgs) == 0 {
			return out, nil
		}
		req.Seq = rep.Msgs[len(rep.Msgs)-1].Seq + 1
	}
}

// with is req asking for the last messages of filters.
func with(req Request, filters []string) Request {
	req.MultiLast = filters
	return req
}
