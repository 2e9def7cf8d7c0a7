package anthropic

import (
	"github.com/lanefleet/lanefleet/provider/internal/wirecache"
)

// WireCacheBytesDefault bounds what an adapter keeps of its sessions' last
// requests (see wireCache).
const WireCacheBytesDefault = wirecache.BytesDefault

// wireCache keeps, per session, the wire messages of the session's last
// Messages request and their JSON, so that the next request of a long
// session encodes only the messages that are new (see
// provider/internal/wirecache): a message's JSON is reused only when the
// message is the same (message.Snapshot, for the same model) or
// equal field by field (apiMessage.equal).
type wireCache = wirecache.Cache[apiMessage, wireConv]

type wireForms = wirecache.Forms[apiMessage, wireConv]

// wireConv is what one message of the history became on the wire.
type wireConv struct {
	am apiMessage // a user or assistant message's; the run's message for the first of a run of tool results
	ok bool       // am is sent (a message may have nothing to send)
	// blk is a tool result's block; run, for the first of a run of
	// results, how many am holds (0: am is not the run's).
	blk apiBlock
	run int
}

func newWireCache(maxBytes int) *wireCache {
	return wirecache.New[apiMessage, wireConv](maxBytes, (*apiMessage).equal)
}

// equal reports whether a and b encode the same: every field of
// apiMessage and apiBlock (TestAPIMessageEqualCoversFields keeps this
// list whole). A tool call's input is the same when it is the very same
// map (a message's maps are never changed in place: see
// message.Snapshot) or both are empty.
func (a *apiMessage) equal(b *apiMessage) bool {
	if a.Role != b.Role || len(a.Content) != len(b.Content) || (a.Content == nil) != (b.Content == nil) {
		return false
	}
	for i := range a.Content {
		if !a.Content[i].equal(&b.Content[i]) {
			return false
		}
	}
	return true
}

func (a *apiBlock) equal(b *apiBlock) bool {
	return a.Type == b.Type && strEqual(a.Text, b.Text) && strEqual(a.Thinking, b.Thinking) && strEqual(a.Signature, b.Signature) &&
		a.Data == b.Data && (a.Source == nil) == (b.Source == nil) && (a.Source == nil || *a.Source == *b.Source) &&
		a.ID == b.ID && a.Name == b.Name && wirecache.SameMap(a.Input, b.Input) && a.ToolUseID == b.ToolUseID &&
		wirecache.ContentEqual(a.Content, b.Content, (*apiBlock).equal) && a.IsError == b.IsError &&
		(a.CacheControl == nil) == (b.CacheControl == nil) && (a.CacheControl == nil || *a.CacheControl == *b.CacheControl)
}

func strEqual(a, b *string) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}
