package lanefleet

import (
	"testing"

	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
)

// FuzzDecodeReply: whatever answers on a lane service subject, the client's
// decode returns an error or a value; it never allocates what a header
// declares (the 13-byte memory bomb of issue 10 is the first seed).
func FuzzDecodeReply(f *testing.F) {
	f.Add([]byte{0x81, 0xa6, 'i', 'm', 'a', 'g', 'e', 's', 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x81, 0xa1, 'e', 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		var h sessionsvc.HistoryReply
		_ = decodeReply(data, &h)
		var e sessionsvc.EventsReply
		_ = decodeReply(data, &e)
		var s sessionsvc.SettingsReply
		_ = decodeReply(data, &s)
	})
}
