package openai

import (
	"bytes"
	"encoding/json"
	"slices"

	"github.com/lanefleet/lanefleet/provider/internal/wirecache"
)

// respWireCache keeps, per session, the input items of the session's last
// Responses request and their JSON, so that the next request of a long
// session encodes only the items that are new (see
// provider/internal/wirecache): an item's JSON is reused only when the
// message it was made of is the same (message.Snapshot, for the same
// model) or the item is equal field by field
// (respInputEqual).
type respWireCache = wirecache.Cache[respInput, respConv]

// respConv is what one message of the history became on the wire.
type respConv struct {
	items []respInput // in order; none when the message sends nothing
}

func newRespWireCache(maxBytes int) *respWireCache {
	return wirecache.New[respInput, respConv](maxBytes, respInputEqual)
}

// respInputEqual reports whether a and b encode the same: every field of
// each input item type (TestRespInputEqualCoversFields keeps this list
// whole). An item of any other type is equal to nothing.
func respInputEqual(a, b *respInput) bool {
	switch x := (*a).(type) {
	case respInputMessage:
		y, ok := (*b).(respInputMessage)
		return ok && x.Role == y.Role && wirecache.ContentEqual(x.Content, y.Content, samePart)
	case respOutputMessage:
		y, ok := (*b).(respOutputMessage)
		return ok && x.Type == y.Type && x.ID == y.ID && x.Role == y.Role && x.Status == y.Status && x.Phase == y.Phase &&
			(x.Content == nil) == (y.Content == nil) && slices.EqualFunc(x.Content, y.Content, respOutputText.equal)
	case respFunctionCall:
		y, ok := (*b).(respFunctionCall)
		return ok && x == y
	case respFunctionOutput:
		y, ok := (*b).(respFunctionOutput)
		return ok && x.Type == y.Type && x.CallID == y.CallID && wirecache.ContentEqual(x.Output, y.Output, samePart)
	case json.RawMessage:
		y, ok := (*b).(json.RawMessage)
		return ok && (x == nil) == (y == nil) && bytes.Equal(x, y)
	}
	return false
}

// equal compares two output texts; annotations are equal only when both
// are empty alike (the requests send none).
func (a respOutputText) equal(b respOutputText) bool {
	return a.Type == b.Type && a.Text == b.Text &&
		(a.Annotations == nil) == (b.Annotations == nil) && len(a.Annotations) == 0 && len(b.Annotations) == 0
}

// samePart compares two content parts (comparable values).
func samePart(x, y *respPart) bool { return *x == *y }
