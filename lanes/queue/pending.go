package queue

import (
	"strconv"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet/ecmatext"
)

// Item is one queued message.
type Item struct {
	// Seq is the message's inbound stream sequence (order and cursor).
	Seq uint64
	// Prompt is the message text as the agent sees it.
	Prompt string
	// At is when the message arrived.
	At time.Time
}

// Reason says why a message did not get a turn of its own.
type Reason string

// Reasons.
const (
	// ReasonCapRefused: the queue was full and the drop policy is new.
	ReasonCapRefused Reason = "queue full: newest message refused (drop policy new)"
	// ReasonCapEvicted: evicted at the cap by drop policy old.
	ReasonCapEvicted Reason = "queue full: oldest message evicted (drop policy old)"
	// ReasonCapSummarized: evicted at the cap by drop policy summarize;
	// its summary line is sent with a later turn.
	ReasonCapSummarized Reason = "queue full: oldest message summarized (drop policy summarize)"
)

// Dropped is a message that will not get a turn of its own, and why.
type Dropped struct {
	Item   Item
	Reason Reason
}

// Pending is the follow-up queue of one lane: the queued items, oldest
// first, plus the overflow bookkeeping of drop policy summarize.
type Pending struct {
	// Items are the queued messages, oldest first.
	Items []Item
	// DroppedCount counts messages summarised since the last summary.
	DroppedCount int
	// SummaryLines hold one line per summarised message (at most Cap).
	SummaryLines []string
	// LastEnqueuedAt is when the last message was queued.
	LastEnqueuedAt time.Time
}

// Add queues it under the cap and drop policy of s and reports whether it
// was accepted and which queued items were evicted to make room.
//
// A cap below 1 means no cap (Settings from Resolve always have one); an
// empty drop policy means DropDefault.
func (p *Pending) Add(it Item, s Settings, now time.Time) (accepted bool, evicted []Dropped) {
	if s.Drop == "" {
		s.Drop = DropDefault
	}
	p.LastEnqueuedAt = now
	if s.Cap > 0 && len(p.Items) >= s.Cap {
		if s.Drop == DropNew {
			return false, nil
		}
		n := len(p.Items) - s.Cap + 1
		reason := ReasonCapEvicted
		if s.Drop == DropSummarize {
			reason = ReasonCapSummarized
		}
		evicted = make([]Dropped, 0, n)
		for _, q := range p.Items[:n] {
			evicted = append(evicted, Dropped{Item: q, Reason: reason})
			if s.Drop == DropSummarize {
				p.DroppedCount++
				p.SummaryLines = append(p.SummaryLines, SummaryLine(q.Prompt))
			}
		}
		if extra := len(p.SummaryLines) - s.Cap; extra > 0 {
			p.SummaryLines = append(p.SummaryLines[:0:0], p.SummaryLines[extra:]...)
		}
		p.Items = append(p.Items[:0:0], p.Items[n:]...)
	}
	p.Items = append(p.Items, it)
	return true, evicted
}

// SummaryPrompt returns the overflow summary of drop policy summarize
// ("[Queue overflow] Dropped <n> message(s) due to cap." and the summary
// lines), or "" when nothing was summarised. It does not clear it.
func (p *Pending) SummaryPrompt(s Settings) string {
	if s.normalized().Drop != DropSummarize || p.DroppedCount <= 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("[Queue overflow] Dropped ")
	b.WriteString(strconv.Itoa(p.DroppedCount))
	if p.DroppedCount == 1 {
		b.WriteString(" message due to cap.")
	} else {
		b.WriteString(" messages due to cap.")
	}
	if len(p.SummaryLines) > 0 {
		b.WriteString("\nSummary:")
		for _, l := range p.SummaryLines {
			b.WriteString("\n- ")
			b.WriteString(l)
		}
	}
	return b.String()
}

// SummaryLineMax is the longest summary line, in UTF-16 units.
const SummaryLineMax = 160

// SummaryLine is the one-line summary of a dropped message: whitespace runs
// collapsed to one space, trimmed, and elided to SummaryLineMax UTF-16 units
// with a trailing "…".
func SummaryLine(text string) string {
	cleaned := strings.Join(strings.FieldsFunc(text, ecmatext.IsSpace), " ")
	if ecmatext.Len(cleaned) <= SummaryLineMax {
		return cleaned
	}
	cut := ecmatext.Prefix(cleaned, SummaryLineMax-1)
	return strings.TrimRightFunc(cut, ecmatext.IsSpace) + "…"
}

// CollectTitle heads a collected prompt.
const CollectTitle = "[Queued messages while agent was busy]"

// CollectPrompt merges queued prompts into one: the title, the overflow
// summary if any, then "---\nQueued #<i>\n<prompt>" per item, joined by
// blank lines.
func CollectPrompt(prompts []string, summary string) string {
	blocks := make([]string, 0, len(prompts)+2)
	blocks = append(blocks, CollectTitle)
	if summary != "" {
		blocks = append(blocks, summary)
	}
	for i, p := range prompts {
		blocks = append(blocks, "---\nQueued #"+strconv.Itoa(i+1)+"\n"+p)
	}
	return strings.Join(blocks, "\n\n")
}
