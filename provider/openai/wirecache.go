package openai

import (
	"bytes"
	"encoding/json"
	"slices"

	"github.com/lanefleet/lanefleet/provider/internal/wirecache"
)

// WireCacheBytesDefault bounds what a Chat Completions or a Responses
// adapter keeps of its sessions' last requests (see wireCache and
// respWireCache).
const WireCacheBytesDefault = wirecache.BytesDefault

// wireCache keeps, per session, the wire messages of the session's last
// Chat Completions request and their JSON, so that the next request of a
// long session encodes only the messages that are new (see
// provider/internal/wirecache): a message's JSON is reused only when the
// message is the same (message.Snapshot, for the same model) or
// equal field by field (chatMessage.equal).
type wireCache = wirecache.Cache[chatMessage, wireConv]

// wireConv is what one message became on the wire.
type wireConv struct {
	cm   chatMessage
	ok   bool       // cm is sent (a user message may have nothing to send)
	imgs []chatPart // a tool result's images, sent after its run of results
}

func newWireCache(maxBytes int) *wireCache {
	return wirecache.New[chatMessage, wireConv](maxBytes, (*chatMessage).equal)
}

// equal reports whether a and b encode the same: every field of
// chatMessage (TestChatMessageEqualCoversFields keeps this list whole).
func (a *chatMessage) equal(b *chatMessage) bool {
	return a.Role == b.Role && a.Name == b.Name && a.ToolCallID == b.ToolCallID &&
		a.ReasoningContent == b.ReasoningContent && a.Reasoning == b.Reasoning && a.ReasoningText == b.ReasoningText &&
		wirecache.ContentEqual(a.Content, b.Content, func(x, y *chatPart) bool { return x.equal(*y) }) && slices.Equal(a.ToolCalls, b.ToolCalls) &&
		slices.EqualFunc(a.ReasoningDetails, b.ReasoningDetails, func(x, y json.RawMessage) bool { return bytes.Equal(x, y) })
}

func (a chatPart) equal(b chatPart) bool {
	return a.Type == b.Type && a.Text == b.Text &&
		(a.ImageURL == nil) == (b.ImageURL == nil) && (a.ImageURL == nil || *a.ImageURL == *b.ImageURL) &&
		(a.CacheControl == nil) == (b.CacheControl == nil) && (a.CacheControl == nil || *a.CacheControl == *b.CacheControl)
}
