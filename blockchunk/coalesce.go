package blockchunk

import (
	"time"

	"github.com/lanefleet/lanefleet/internal/jstext"
)

// CoalesceIdleDefault is the reference's coalescing idle time.
const CoalesceIdleDefault = 1000 * time.Millisecond

// CoalesceConfig configures a Coalescer. Sizes are UTF-16 code units.
type CoalesceConfig struct {
	// MinChars is the size a merged block must reach before an idle flush
	// sends it (at least 1).
	MinChars int
	// MaxChars is the largest merged block; a block that would grow past
	// it is sent first (raised to MinChars when smaller).
	MaxChars int
	// Idle is how long after the last Add an idle flush happens; 0 turns
	// idle flushing off (blocks then wait for MaxChars or Flush).
	Idle time.Duration
	// Joiner separates merged blocks.
	Joiner string
}

// CoalesceConfigFor returns the reference defaults for blocks coming out of
// a chunker configured with chunking: the chunker's minimum, the channel's
// text limit (ChannelTextLimitDefault when textLimit ≤ 0) as maximum, a
// 1 s idle time and a joiner matching the break preference ("\n\n", "\n" or
// " ").
func CoalesceConfigFor(chunking Config, textLimit int) CoalesceConfig {
	if textLimit <= 0 {
		textLimit = ChannelTextLimitDefault
	}
	joiner := "\n\n"
	switch chunking.BreakPreference {
	case BreakNewline:
		joiner = "\n"
	case BreakSentence:
		joiner = " "
	}
	minChars := chunking.MinChars
	if minChars <= 0 {
		minChars = MinCharsDefault
	}
	return CoalesceConfig{MinChars: min(minChars, textLimit), MaxChars: textLimit, Idle: CoalesceIdleDefault, Joiner: joiner}
}

// Coalescer merges consecutive small blocks into fewer, larger ones. It is a
// pure state machine: the caller passes the current time to Add and Tick,
// calls Tick at (or after) Deadline, and Flush at a break (tool start,
// message end, run end). Every method returns the blocks to send now, in
// order; text is never dropped except blank blocks.
type Coalescer struct {
	minChars, maxChars int
	idle               time.Duration
	joiner             string

	buf      string
	deadline time.Time
	armed    bool
}

// NewCoalescer returns a coalescer for cfg.
func NewCoalescer(cfg CoalesceConfig) *Coalescer {
	minChars := max(1, cfg.MinChars)
	return &Coalescer{
		minChars: minChars,
		maxChars: max(minChars, cfg.MaxChars),
		idle:     max(0, cfg.Idle),
		joiner:   cfg.Joiner,
	}
}

// Add buffers one block and returns whatever must be sent now: the buffer
// when the block would make it exceed MaxChars, a block that alone reaches
// MaxChars, or the merged buffer once it reaches MaxChars.
func (c *Coalescer) Add(block string, now time.Time) []string {
	if jstext.IsBlank(block) {
		return nil
	}
	next := block
	if c.buf != "" {
		next = c.buf + c.joiner + block
	}
	if jstext.Len(next) > c.maxChars {
		if c.buf == "" {
			return []string{block}
		}
		out := []string{c.take()}
		if jstext.Len(block) >= c.maxChars {
			return append(out, block)
		}
		c.buf = block
		c.arm(now)
		return out
	}
	c.buf = next
	if jstext.Len(c.buf) >= c.maxChars {
		return []string{c.take()}
	}
	c.arm(now)
	return nil
}

// Tick performs the idle flush when its deadline has passed: the buffer is
// sent if it reached MinChars, otherwise the idle timer starts again.
func (c *Coalescer) Tick(now time.Time) []string {
	if !c.armed || now.Before(c.deadline) {
		return nil
	}
	c.armed = false
	if c.buf == "" {
		return nil
	}
	if jstext.Len(c.buf) < c.minChars {
		c.arm(now)
		return nil
	}
	return []string{c.take()}
}

// Flush sends the buffer whatever its size.
func (c *Coalescer) Flush() []string {
	c.armed = false
	if c.buf == "" {
		return nil
	}
	return []string{c.take()}
}

// Deadline returns when Tick should next be called, if an idle flush is
// pending.
func (c *Coalescer) Deadline() (time.Time, bool) { return c.deadline, c.armed }

// Buffered returns the merged text not yet sent.
func (c *Coalescer) Buffered() string { return c.buf }

// Reset discards the buffer and the idle timer.
func (c *Coalescer) Reset() {
	c.buf = ""
	c.armed = false
}

func (c *Coalescer) take() string {
	s := c.buf
	c.buf = ""
	c.armed = false
	return s
}

func (c *Coalescer) arm(now time.Time) {
	if c.idle <= 0 {
		c.armed = false
		return
	}
	c.deadline = now.Add(c.idle)
	c.armed = true
}
