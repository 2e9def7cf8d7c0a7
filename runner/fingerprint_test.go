package runner

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
)

// TestInputFingerprintStable: a turn's input fingerprint is what workers
// before the hand-written inbound encoder computed (the library's msgpack
// of the message into the hash), so a journal an older worker left is
// still replayed by a newer one during a rolling upgrade.
func TestInputFingerprintStable(t *testing.T) {
	t.Parallel()
	old := func(in Input) string {
		h := sha256.New()
		if in.Inbound != nil {
			_ = msgpack.NewEncoder(h).Encode(in.Inbound)
		}
		h.Write([]byte(in.RunID))
		h.Write([]byte{0})
		h.Write([]byte(lastID(in.History)))
		return hex.EncodeToString(h.Sum(nil)[:12])
	}
	hist := pingPongHistory(3)
	for _, in := range []Input{
		{RunID: "r1", Inbound: &events.Inbound{V: 1, ID: "m1", Text: "ping", Sent: 1700000000000}},
		{RunID: "r2", Inbound: &events.Inbound{Text: "look", Images: []events.Image{{MimeType: "image/png", Data: "AAAA"}}, Mode: "steer", AuthProfile: "a:b"}, History: hist},
		{RunID: "r3", Inbound: &events.Inbound{ToolResults: []events.ToolResult{{ToolCallID: "c1", Text: "ok"}}}, History: hist},
		{RunID: "r4", History: []message.Entry{}},
	} {
		if got, want := inputFingerprint(in), old(in); got != want {
			t.Fatalf("%s: fingerprint %s, workers before wrote %s", in.RunID, got, want)
		}
	}
}
