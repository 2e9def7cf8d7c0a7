package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/guard"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/tools"
)

// Wire constants shared by services and callers.
const (
	// SubjectPrefix opens the subject of every tool endpoint:
	// agent.tool.<name>.
	SubjectPrefix = "agent.tool."

	// MetaDescription is the endpoint metadata key holding the tool's
	// description.
	MetaDescription = "description"
	// MetaParameters is the endpoint metadata key holding the tool's
	// JSON-schema parameters, JSON-encoded. Discovery only takes endpoints
	// that carry it.
	MetaParameters = "parameters"
	// MetaIdempotent, set to "true", declares the tool safe to call again
	// with the same arguments (tools.Idempotent): a call whose outcome was
	// lost with its worker is then repeated instead of reported unknown.
	MetaIdempotent = "idempotent"

	// HeaderTimeout, on a request, is how many milliseconds the caller
	// waits for the reply; the service cancels the call's context then.
	HeaderTimeout = "Lanefleet-Tool-Timeout-Ms"
	// HeaderUpdates, set to "1" on a request, asks the service to publish
	// partial results to the request's reply subject before the reply.
	HeaderUpdates = "Lanefleet-Tool-Updates"
	// HeaderUpdate, set to "1", marks a message on the reply subject as a
	// partial result rather than the reply.
	HeaderUpdate = "Lanefleet-Tool-Update"
	// HeaderIdempotencyKey, on a request, is the call's idempotency key
	// (tools.Call.Key): the same on every execution of one call, so a
	// service that keeps the results of recent keys can answer a repeated
	// call without repeating its effect.
	HeaderIdempotencyKey = "Lanefleet-Idempotency-Key"
	// HeaderCallToken, on a request, names the call for a later cancel:
	// a caller whose context ends before the reply (its run was stopped)
	// publishes a message with the same header to CancelSubject(name),
	// and the instance running the call cancels the call's context.
	HeaderCallToken = "Lanefleet-Tool-Call-Token"
	// HeaderCancelReason, on a cancel message, says why the caller gave
	// up: "timeout" when its timeout passed (the call then ends as a
	// timeout, whichever of the cancel and the service's own timer comes
	// first); anything else or nothing means it was cancelled.
	HeaderCancelReason = "Lanefleet-Tool-Cancel-Reason"
	// HeaderHeartbeat, on a request, asks the service to publish a
	// heartbeat to the request's reply subject every so many milliseconds
	// while the call runs, the first as the call starts: a caller that
	// has had one and then hears nothing for HeartbeatMisses intervals
	// knows the process running the call is gone (killed, or cut off from
	// NATS) and fails the call then rather than at its timeout.
	HeaderHeartbeat = "Lanefleet-Tool-Heartbeat-Ms"
	// HeaderBeat, set to "1", marks a message on the reply subject as a
	// heartbeat (no body) rather than a partial result or the reply.
	HeaderBeat = "Lanefleet-Tool-Heartbeat"
)

// Heartbeat bounds.
const (
	// HeartbeatDefault is how often a caller asks to hear from the
	// service running its call (DiscoverConfig.Heartbeat).
	HeartbeatDefault = 5 * time.Second
	// HeartbeatMin is the shortest interval a service beats at; a request
	// asking for less gets beats this often.
	HeartbeatMin = 100 * time.Millisecond
	// heartbeatMax bounds the interval a request may ask for, so that the
	// milliseconds cannot overflow a duration.
	heartbeatMax = time.Hour
	// HeartbeatMisses is how many intervals without a message from the
	// service a caller waits, once it had a heartbeat, before it fails
	// the call with ErrLost.
	HeartbeatMisses = 3
)

// Error codes a service puts in the Nats-Service-Error-Code header.
const (
	CodeBadRequest  = "400" // the request body is not a valid call
	CodeTooLarge    = "413" // the result does not fit in one NATS message
	CodeToolFailed  = "500" // the tool returned an error, panicked or was stopped while running
	CodeUnavailable = "503" // the service is stopping and did not run the call; another may
	CodeTimeout     = "504" // the caller's timeout passed while the tool ran
)

// TruncationNotice ends a text block cut because the result was too large
// to send or to hand to the model.
const TruncationNotice = "\n\n⚠️ [Remote tool output truncated: it exceeded the size a tool result may have. Request a smaller part, e.g. with offset/limit parameters.]"

// maxErrorHeader caps the one-line error description sent in the
// Nats-Service-Error header; the whole message travels in the body.
const maxErrorHeader = 1024

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidName reports whether name can be a remote tool's name:
// 1 to 64 ASCII letters, digits, '_' or '-'.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// Subject returns the subject a tool named name is served on.
func Subject(name string) string { return SubjectPrefix + name }

// CancelSubject returns the subject a caller cancels its calls of the tool
// named name on: agent.tool.<name>.cancel. Every instance serving the tool
// hears it; the one running the call (by HeaderCallToken) cancels it.
func CancelSubject(name string) string { return SubjectPrefix + name + ".cancel" }

// request is the body of a call.
type request struct {
	ID         string         `json:"id"`
	Name       string         `json:"name"`
	Args       map[string]any `json:"args"`
	SessionKey string         `json:"sessionKey,omitempty"`
	RunID      string         `json:"runId,omitempty"`
}

// reply is the body of a reply and of a partial result.
type reply struct {
	Content []message.Block `json:"content"`
	Details map[string]any  `json:"details,omitempty"`
	IsError bool            `json:"isError"`
}

// errorBody is the body of an error reply.
type errorBody struct {
	Error string `json:"error"`
}

// RunInfo identifies the agent run a call belongs to.
type RunInfo struct {
	SessionKey string
	RunID      string
}

type runInfoKey struct{}

// WithRunInfo returns a context whose remote tool calls carry ri in their
// request. A service hands it to the tool in the call's context.
func WithRunInfo(ctx context.Context, ri RunInfo) context.Context {
	return context.WithValue(ctx, runInfoKey{}, ri)
}

// RunInfoFrom returns the RunInfo of ctx, zero when there is none.
func RunInfoFrom(ctx context.Context) RunInfo {
	ri, _ := ctx.Value(runInfoKey{}).(RunInfo)
	return ri
}

// errTooLarge means a result does not fit in one message even after its
// text was cut.
var errTooLarge = errors.New("too large")

// capText cuts the text blocks of content to maxChars UTF-16 units in all,
// each ending with TruncationNotice when cut. content is not modified.
func capText(content []message.Block, maxChars int) []message.Block {
	c, _, changed := guard.TruncateContent(message.BlocksOf(content...), maxChars, guard.TruncateOptions{Notice: TruncationNotice})
	if !changed {
		return content
	}
	return c.Blocks
}

// encodeResult encodes res as a reply body of at most maxBytes bytes, its
// text first capped at maxChars and then cut further until the body fits.
// It returns errTooLarge when cutting text cannot make it fit (large images
// or details).
func encodeResult(res tools.Result, maxChars, maxBytes int) ([]byte, error) {
	r := reply{Content: capText(res.Content, maxChars), Details: res.Details, IsError: res.IsError}
	if r.Content == nil {
		r.Content = []message.Block{}
	}
	for range 6 {
		data, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("encode result: %w", err)
		}
		if len(data) <= maxBytes {
			return data, nil
		}
		text := guard.TextLen(message.BlocksOf(r.Content...))
		if text == 0 {
			break
		}
		// Shrink the text in proportion to the overshoot, with a margin
		// for JSON escaping and multi-byte characters.
		budget := int(float64(text) * float64(maxBytes) / float64(len(data)) * 0.9)
		next := capText(r.Content, budget)
		if guard.TextLen(message.BlocksOf(next...)) >= text {
			break // the minimum kept per block was reached
		}
		r.Content = next
	}
	return nil, errTooLarge
}

// MaxDetailsBytes bounds the details of a remote result, encoded as JSON.
// Details travel in the tool result event and the transcript record: a tool
// server sending more must not make the turn too large to commit.
const MaxDetailsBytes = 16 << 10

// Caps on the images of a remote result. Images travel in the transcript
// record like text: a tool server sending more must not make the turn too
// large to commit.
const (
	// MaxResultImages is the most image blocks a result keeps.
	MaxResultImages = 8
	// MaxResultImageBytes bounds the decoded bytes of a result's images
	// together.
	MaxResultImageBytes = 2 << 20
	// maxMimeType bounds an image's MIME type.
	maxMimeType = 64
)

// decodeResult decodes a reply or partial-result body and caps it: its
// images at MaxResultImages and MaxResultImageBytes (capImages), its text
// at maxChars and its details at MaxDetailsBytes (larger details are
// replaced by a note saying so). Only text and image blocks are accepted.
func decodeResult(data []byte, maxChars int) (tools.Result, error) {
	var r reply
	if err := json.Unmarshal(data, &r); err != nil {
		return tools.Result{}, err
	}
	for i, b := range r.Content {
		if b.Type != message.BlockText && b.Type != message.BlockImage {
			return tools.Result{}, fmt.Errorf("content block %d has type %q; a tool result holds text and image blocks", i, b.Type)
		}
	}
	return tools.Result{Content: capText(capImages(r.Content), maxChars), Details: capDetails(r.Details), IsError: r.IsError}, nil
}

// capImages returns content with each block reduced to the fields of its
// type (text; MIME type and data), since any other field would carry data
// past every cap, and with the images that do not fit the caps, in order,
// or whose MIME type is not image/<subtype> (at most 64 bytes), replaced
// by a text note the model sees. content is not modified.
func capImages(content []message.Block) []message.Block {
	out := make([]message.Block, 0, len(content))
	images, total := 0, 0
	for i, b := range content {
		if b.Type == message.BlockText {
			out = append(out, message.Text(b.Text))
			continue
		}
		size := decodedSize(b.Data)
		switch {
		case !validImageType(b.MimeType):
			out = append(out, message.Text(fmt.Sprintf("[image %d omitted: its MIME type is not image/<subtype>]", i+1)))
		case images >= MaxResultImages || total+size > MaxResultImageBytes:
			out = append(out, message.Text(fmt.Sprintf("[image %d (%s, %s) omitted: a tool result may carry %d images of %s in all]",
				i+1, b.MimeType, sizeText(size), MaxResultImages, sizeText(MaxResultImageBytes))))
		default:
			images, total = images+1, total+size
			out = append(out, message.Image(b.MimeType, b.Data))
		}
	}
	return out
}

// decodedSize is the size of base64 data once decoded (padded or not),
// without decoding it.
func decodedSize(data string) int {
	n, pad := len(data), 0
	for pad < 2 && n-pad > 0 && data[n-1-pad] == '=' {
		pad++
	}
	return (n - pad) * 3 / 4
}

// validImageType reports whether t is image/<subtype> within maxMimeType
// bytes, of printable ASCII.
func validImageType(t string) bool {
	sub, ok := strings.CutPrefix(t, "image/")
	if !ok || sub == "" || len(t) > maxMimeType {
		return false
	}
	for i := 0; i < len(sub); i++ {
		if c := sub[i]; c <= ' ' || c >= 0x7f || c == '/' {
			return false
		}
	}
	return true
}

// sizeText renders a byte count for the model.
func sizeText(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// capDetails returns d, or a note in its place when it encodes to more than
// MaxDetailsBytes.
func capDetails(d map[string]any) map[string]any {
	if len(d) == 0 {
		return d
	}
	b, err := json.Marshal(d)
	if err == nil && len(b) <= MaxDetailsBytes {
		return d
	}
	return map[string]any{"truncated": true, "note": fmt.Sprintf("the tool's details (%d bytes) were dropped: the limit is %d", len(b), MaxDetailsBytes)}
}

// headerLine makes msg fit in a header value: one line of at most
// maxErrorHeader bytes, never empty, never splitting a rune.
func headerLine(msg string) string {
	msg = strings.Join(strings.Fields(msg), " ")
	if msg == "" {
		return "tool failed"
	}
	if len(msg) <= maxErrorHeader {
		return msg
	}
	cut := maxErrorHeader - len("…")
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}
