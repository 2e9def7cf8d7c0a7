package google

import (
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/sse"
	"github.com/lanefleet/lanefleet/provider/internal/stream"
)

// FuzzParser feeds arbitrary chunks to the parser: it may reject them,
// never panic.
func FuzzParser(f *testing.F) {
	f.Add(`{"candidates":[{"content":{"parts":[{"text":"a","thought":true,"thoughtSignature":"x"},{"functionCall":{"name":"f","args":{}}}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1}}`)
	f.Add(`{"candidates": [{"content": {"parts": [{"text": "w"}]}}],"usageMetadata": {"promptTokenCount": 65}}`)
	f.Add(`{"error":{"code":429}}`)
	f.Fuzz(func(t *testing.T, data string) {
		p := parser{b: stream.NewBuilder(provider.Model{}, time.Unix(0, 0), nil), cur: -1, ids: map[string]bool{}}
		_ = p.Event(sse.Event{Data: []byte(data)})
		p.b.Done("stop")
	})
}
