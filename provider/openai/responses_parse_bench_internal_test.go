package openai

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/sse"
	"github.com/lanefleet/lanefleet/provider/internal/stream"
)

// BenchmarkRespParse applies the events of real Responses streams to a
// parser, without the HTTP call around them: what parsing costs a reply.
func BenchmarkRespParse(b *testing.B) {
	for _, name := range []string{"openai-responses-cached-input.sse", "openai-responses-reasoning-summary-text.sse"} {
		b.Run(name, func(b *testing.B) {
			body, err := os.ReadFile("testdata/" + name)
			if err != nil {
				b.Fatal(err)
			}
			var evs []sse.Event
			r := sse.NewReader(bytes.NewReader(body))
			for {
				ev, err := r.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				evs = append(evs, sse.Event{Name: bytes.Clone(ev.Name), Data: bytes.Clone(ev.Data)})
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				p := &respParser{b: stream.NewBuilder(provider.Model{}, time.Unix(0, 0), nil), items: map[int]int{}, parts: map[int]int{}}
				for _, ev := range evs {
					if perr := p.Event(ev); perr != nil {
						b.Fatal(perr)
					}
				}
				if p.stop == "" {
					b.Fatal("no stop")
				}
			}
		})
	}
}
