package runner

import (
	"strings"

	"github.com/lanefleet/lanefleet/blockchunk"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/replytext"
)

// subscriber turns one attempt's provider events into run events (runtime
// spec §22): cleaned assistant text that only grows, thinking deltas, block
// replies, and the answer texts the payloads are built from.
type subscriber struct {
	sink     Sink
	text     replytext.Stream
	thinking strings.Builder
	chunker  *blockchunk.Chunker // nil = no block replies
	filter   replytext.BlockFilter
	texts    []string // cleaned final text of each assistant message
}

// init sets a zero subscriber up to emit to sink.
func (s *subscriber) init(sink Sink, blocks *blockchunk.Config) {
	s.sink = sink
	if blocks != nil {
		s.chunker = blockchunk.New(*blocks)
	}
}

// reset starts a new assistant message.
func (s *subscriber) reset() {
	s.text.Reset()
	s.thinking.Reset()
	s.filter.Reset()
	if s.chunker != nil {
		s.chunker.Reset()
	}
}

func (s *subscriber) event(ev provider.Event) {
	switch ev.Type {
	case provider.EventStart:
		s.reset()
	case provider.EventTextStart, provider.EventTextDelta, provider.EventTextEnd:
		chunk, _, up, ok := s.text.Add(string(ev.Type), ev.Delta, ev.Content)
		if ok {
			s.sink.Emit(events.StreamAssistant, events.EventData{Delta: up.Delta, Text: up.Text})
		}
		if s.chunker != nil && chunk != "" {
			s.chunker.Append(chunk)
		}
		s.flushBlocks(ev.Type == provider.EventTextEnd)
	case provider.EventThinkingDelta:
		s.thinking.WriteString(ev.Delta)
		s.sink.Emit(events.StreamThinking, events.EventData{Delta: ev.Delta, Text: s.thinking.String()})
	case provider.EventDone:
		s.flushBlocks(true)
		if t := replytext.StripTags(s.text.Raw(), false); strings.TrimSpace(t) != "" {
			s.texts = append(s.texts, strings.TrimSpace(t))
		} else if ev.Message != nil {
			if t := strings.TrimSpace(replytext.StripTags(ev.Message.Content.Text(), false)); t != "" {
				s.texts = append(s.texts, t)
			}
		}
	}
}

// flushBlocks emits the blocks the chunker has ready (all of them when
// force is set).
func (s *subscriber) flushBlocks(force bool) {
	if s.chunker == nil {
		return
	}
	s.chunker.Drain(force, func(block string) {
		if b, ok := s.filter.Filter(block); ok && !replytext.IsSilent(b) {
			s.sink.Emit(events.StreamBlock, events.EventData{Text: b})
		}
	})
}
