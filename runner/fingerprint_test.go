package runner

import (
	"crypto/sha256"
	"encoding/hex"
	"runtime"
	"strings"
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
		// Texts on both sides of what is encoded in memory, long
		// strings of every field, images large and many.
		{RunID: "r5", Inbound: &events.Inbound{ID: strings.Repeat("i", 300), Session: strings.Repeat("s", 300), Text: strings.Repeat("t", fingerprintInline),
			Model: "p/" + strings.Repeat("m", 300), Thinking: "high", AuthProfile: strings.Repeat("a", 300), Heartbeat: true}, History: hist},
		{RunID: "r6", Inbound: &events.Inbound{Text: strings.Repeat("t", fingerprintInline+1), Stop: true}},
		{RunID: "r7", Inbound: &events.Inbound{Text: strings.Repeat("x", events.MaxTextBytes)}, History: hist},
		{RunID: "r8", Inbound: &events.Inbound{Text: "two", Images: []events.Image{imageOf(70_000), imageOf(1 << 20)}, Sent: 1}, History: hist},
		{RunID: "r9", Inbound: &events.Inbound{Images: []events.Image{imageOf(1)}}},
		{RunID: "r10", Inbound: &events.Inbound{Text: "tools", Tools: []events.ClientTool{{Name: "t"}},
			ToolResults: []events.ToolResult{{ToolCallID: "c1", Text: strings.Repeat("r", 100_000), IsError: true}}}},
		{RunID: "r11", Inbound: &events.Inbound{}},
	} {
		if got, want := inputFingerprint(in), old(in); got != want {
			t.Fatalf("%s: fingerprint %s, workers before wrote %s", in.RunID, got, want)
		}
	}
}

// imageOf is a PNG image of about n bytes of base64 data.
func imageOf(n int) events.Image {
	return events.Image{MimeType: "image/png", Data: strings.Repeat("A", n)}
}

// TestInputFingerprintAllocs: the fingerprint of an image turn allocates
// as often and about as much whatever its images' size: the message is
// encoded into the hash, not into memory (where a 1 MiB image made a
// buffer of its size, grown in doubling steps from 128 bytes).
func TestInputFingerprintAllocs(t *testing.T) {
	hist := pingPongHistory(3)
	turn := func(n int) Input {
		return Input{RunID: "42", History: hist, Inbound: &events.Inbound{Text: "what is this?", Images: []events.Image{imageOf(n)}}}
	}
	// per measures what a fingerprint of in allocates: how often and how
	// many bytes (AllocsPerRun runs it on one P; its first call is a
	// warm-up).
	per := func(in Input) (allocs float64, bytes uint64) {
		var before, after runtime.MemStats
		const runs = 20
		allocs = testing.AllocsPerRun(runs, func() { _ = inputFingerprint(in) })
		runtime.ReadMemStats(&before)
		allocs2 := testing.AllocsPerRun(runs, func() { _ = inputFingerprint(in) })
		runtime.ReadMemStats(&after)
		return min(allocs, allocs2), (after.TotalAlloc - before.TotalAlloc) / (runs + 1)
	}
	small, smallBytes := per(turn(4 << 10))
	for _, n := range []int{64 << 10, 1 << 20, 8 << 20} {
		allocs, bytes := per(turn(n))
		// Slack for what another goroutine may allocate meanwhile.
		if allocs > small+2 || bytes > smallBytes+(16<<10) {
			t.Errorf("an image of %d bytes: %v allocations of %d bytes a fingerprint; of 4 KiB: %v of %d", n, allocs, bytes, small, smallBytes)
		}
	}
}

// BenchmarkInputFingerprint: a text turn and image turns.
func BenchmarkInputFingerprint(b *testing.B) {
	hist := pingPongHistory(3)
	for _, c := range []struct {
		name string
		in   *events.Inbound
	}{
		{"text", &events.Inbound{Text: "hello there", Sent: 1700000000000}},
		{"image-64KiB", &events.Inbound{Text: "what is this?", Images: []events.Image{imageOf(64 << 10)}}},
		{"image-1MiB", &events.Inbound{Text: "what is this?", Images: []events.Image{imageOf(1 << 20)}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			in := Input{RunID: "42", History: hist, Inbound: c.in}
			b.ReportAllocs()
			for b.Loop() {
				_ = inputFingerprint(in)
			}
		})
	}
}
