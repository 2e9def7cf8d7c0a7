package google

import (
	"github.com/lanefleet/lanefleet/provider/internal/wirecache"
)

// WireCacheBytesDefault bounds what an adapter keeps of its sessions' last
// requests (see wireCache).
const WireCacheBytesDefault = wirecache.BytesDefault

// wireCache keeps, per session, the contents of the session's last
// generateContent request and their JSON, so that the next request of a
// long session encodes only the contents that are new (see
// provider/internal/wirecache): a content's JSON is reused only when the
// message is the same (message.Snapshot, for the same model) or
// equal field by field (apiContent.equal).
type wireCache = wirecache.Cache[apiContent, wireConv]

type wireForms = wirecache.Forms[apiContent, wireConv]

// wireConv is what one message of the history became on the wire.
type wireConv struct {
	c  apiContent // a user or assistant message's; the run's content for the first of a run of tool results
	ok bool       // c is sent (a message may have nothing to send)
	// part and imgs are a tool result's function response and the images
	// sent after its run.
	part apiPart
	imgs []apiPart
	// runLen, for the first of a run of results, is how many results c
	// holds (0: c is not the run's).
	runLen int
}

func newWireCache(maxBytes int) *wireCache {
	return wirecache.New[apiContent, wireConv](maxBytes, (*apiContent).equal)
}

// equal reports whether a and b encode the same: every field of
// apiContent and apiPart and what they point to
// (TestAPIContentEqualCoversFields keeps this list whole). Call
// arguments are the same when they are the very same map (a message's
// maps are never changed in place: see message.Snapshot) or both empty;
// a response (made per request) when its entries are equal strings.
func (a *apiContent) equal(b *apiContent) bool {
	return a.Role == b.Role && partsEqual(a.Parts, b.Parts)
}

func partsEqual(a, b []apiPart) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for i := range a {
		if !a[i].equal(&b[i]) {
			return false
		}
	}
	return true
}

func (a *apiPart) equal(b *apiPart) bool {
	return (a.Text == nil) == (b.Text == nil) && (a.Text == nil || *a.Text == *b.Text) &&
		a.Thought == b.Thought && a.ThoughtSignature == b.ThoughtSignature &&
		(a.InlineData == nil) == (b.InlineData == nil) && (a.InlineData == nil || *a.InlineData == *b.InlineData) &&
		(a.FunctionCall == nil) == (b.FunctionCall == nil) && (a.FunctionCall == nil || a.FunctionCall.equal(b.FunctionCall)) &&
		(a.FunctionResponse == nil) == (b.FunctionResponse == nil) && (a.FunctionResponse == nil || a.FunctionResponse.equal(b.FunctionResponse))
}

func (a *apiFunctionCall) equal(b *apiFunctionCall) bool {
	return a.ID == b.ID && a.Name == b.Name && wirecache.SameMap(a.Args, b.Args)
}

func (a *apiFunctionResp) equal(b *apiFunctionResp) bool {
	if a.ID != b.ID || a.Name != b.Name || (a.Response == nil) != (b.Response == nil) ||
		len(a.Response) != len(b.Response) || !partsEqual(a.Parts, b.Parts) {
		return false
	}
	for k, v := range a.Response {
		s, ok := v.(string)
		w, ok2 := b.Response[k].(string)
		if !ok || !ok2 || s != w {
			return false
		}
	}
	return true
}
