package blockchunk

import (
	"strings"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/ecmatext"
)

// BreakPreference says where the chunker prefers to cut a block.
type BreakPreference string

// Break preferences. The zero value means BreakParagraph.
const (
	BreakParagraph BreakPreference = "paragraph"
	BreakNewline   BreakPreference = "newline"
	BreakSentence  BreakPreference = "sentence"
)

// Defaults of the reference's block streaming.
const (
	MinCharsDefault         = 800
	MaxCharsDefault         = 1200
	ChannelTextLimitDefault = 4000
)

// Config configures a Chunker. Sizes are UTF-16 code units.
type Config struct {
	// MinChars is the smallest block the chunker emits before a forced
	// drain (at least 1).
	MinChars int
	// MaxChars is the largest block; raised to MinChars when smaller.
	MaxChars int
	// BreakPreference is where blocks are cut; empty means paragraph.
	BreakPreference BreakPreference
	// FlushOnParagraph emits every complete paragraph at once, whatever
	// its size (the reference sets it for channels in newline chunk mode).
	FlushOnParagraph bool
}

// DefaultConfig returns the reference defaults (800/1200, paragraph) with the
// maximum clamped to a channel's text limit (ChannelTextLimitDefault when
// textLimit ≤ 0).
func DefaultConfig(textLimit int) Config {
	if textLimit <= 0 {
		textLimit = ChannelTextLimitDefault
	}
	maxChars := max(1, min(MaxCharsDefault, textLimit))
	return Config{MinChars: min(MinCharsDefault, maxChars), MaxChars: maxChars, BreakPreference: BreakParagraph}
}

// Chunker buffers streamed text and cuts it into blocks. The zero value is
// not usable; call New.
type Chunker struct {
	cfg    Config
	pref   BreakPreference
	data   []byte // the buffer between drains; appends amortise
	buf    string // the buffer while a drain cuts it
	n      int    // length of the buffer in UTF-16 units
	ascii  bool   // the buffer is all ASCII (byte offsets are UTF-16 offsets)
	spans  []fence
	offTab []int32 // scratch for offsets of non-ASCII buffers
}

// New returns a chunker for cfg.
func New(cfg Config) *Chunker {
	pref := cfg.BreakPreference
	if pref != BreakNewline && pref != BreakSentence {
		pref = BreakParagraph
	}
	return &Chunker{cfg: cfg, pref: pref}
}

// Append adds streamed text to the buffer.
func (c *Chunker) Append(text string) {
	if text == "" {
		return
	}
	if len(c.data) == 0 {
		c.ascii = true
	}
	c.data = append(c.data, text...)
	n, ascii := ecmatext.LenASCII(text)
	c.n += n
	c.ascii = c.ascii && ascii
}

// Reset discards the buffer.
func (c *Chunker) Reset() {
	c.data = c.data[:0]
	c.n = 0
}

// Buffered returns the text not yet emitted.
func (c *Chunker) Buffered() string { return string(c.data) }

// HasBuffered reports whether any text is buffered.
func (c *Chunker) HasBuffered() bool { return len(c.data) > 0 }

func (c *Chunker) set(s string) {
	c.buf = s
	c.n, c.ascii = ecmatext.LenASCII(s)
}

// offsets returns the offset table of the current buffer.
func (c *Chunker) offsets() offsets {
	if c.ascii {
		return offsets{ascii: true}
	}
	o := newOffsets(c.buf, c.offTab)
	c.offTab = o.u16
	return o
}

// Drain emits the blocks that are ready, in order, through emit. Without
// force it emits only blocks of at least MinChars (or whole paragraphs with
// FlushOnParagraph) and keeps the rest; with force it empties the buffer.
// Whitespace at a cut is dropped, and so is a buffer or block that is only
// whitespace, except that (as in the reference) a forced drain may emit a
// whitespace-only tail. Emitted blocks may end with newlines: callers trim
// the end and skip empty blocks. emit must not call back into c.
func (c *Chunker) Drain(force bool, emit func(block string)) {
	if len(c.data) == 0 {
		return
	}
	minChars := max(1, c.cfg.MinChars)
	maxChars := max(minChars, c.cfg.MaxChars)
	if c.n < minChars && !force && !c.cfg.FlushOnParagraph {
		return
	}
	c.buf = string(c.data)
	defer func() {
		c.data = append(c.data[:0], c.buf...)
		c.buf = ""
	}()

	if c.cfg.FlushOnParagraph && !force {
		c.drainParagraphs(emit, maxChars)
		return
	}
	if c.n < minChars && !force {
		return
	}
	if force && c.n <= maxChars {
		if !ecmatext.IsBlank(c.buf) {
			emit(c.buf)
		}
		c.set("")
		return
	}
	for c.n >= minChars || (force && c.buf != "") {
		var br brk
		if force && c.n <= maxChars {
			br = c.pickSoft(1)
		} else if force {
			br = c.pick(1)
		} else {
			br = c.pick(c.cfg.MinChars)
		}
		if br.index <= 0 {
			if force {
				emit(c.buf)
				c.set("")
			}
			return
		}
		if !c.emitBreak(br, emit) {
			continue
		}
		if !force && (c.n < minChars || c.n < maxChars) {
			return
		}
	}
}

// AppendDrain is Append followed by Drain, collecting the blocks into dst.
func (c *Chunker) AppendDrain(dst []string, text string, force bool) []string {
	c.Append(text)
	c.Drain(force, func(b string) { dst = append(dst, b) })
	return dst
}

// brk is a break decision: a byte index into the buffer and, when the cut
// falls inside a fence, the fence to close and reopen.
type brk struct {
	index int
	fence *fence
}

// drainParagraphs emits every complete paragraph, falling back to the normal
// picker when no paragraph break lies within maxChars and the buffer is full.
func (c *Chunker) drainParagraphs(emit func(string), maxChars int) {
	for c.buf != "" {
		c.spans = parseFences(c.buf, c.spans)
		idx, length := nextParagraphBreak(c.buf, c.spans)
		if idx < 0 || ecmatext.Len(c.buf[:idx]) > maxChars {
			if c.n >= maxChars {
				if br := c.pick(1); br.index > 0 {
					c.emitBreak(br, emit)
					continue
				}
			}
			return
		}
		if chunk := c.buf[:idx]; !ecmatext.IsBlank(chunk) {
			emit(chunk)
		}
		c.set(stripLeadingNewlines(c.buf[idx+length:]))
	}
}

// nextParagraphBreak finds the first match of /\n[\t ]*\n+/ outside fences
// and returns its byte index and length, or -1.
func nextParagraphBreak(s string, spans []fence) (int, int) {
	from := 0
	for from < len(s) {
		p := strings.IndexByte(s[from:], '\n')
		if p < 0 {
			return -1, 0
		}
		p += from
		j := p + 1
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		if j >= len(s) || s[j] != '\n' {
			from = p + 1
			continue
		}
		for j < len(s) && s[j] == '\n' {
			j++
		}
		if safeBreak(spans, p) {
			return p, j - p
		}
		from = j
	}
	return -1, 0
}

// emitBreak emits buf[:br.index] (with fence repair) and keeps the rest. It
// reports false when the chunk was blank and only discarded.
func (c *Chunker) emitBreak(br brk, emit func(string)) bool {
	idx := br.index
	if idx <= 0 {
		return false
	}
	chunk := c.buf[:idx]
	if ecmatext.IsBlank(chunk) {
		c.set(ecmatext.TrimStart(stripLeadingNewlines(c.buf[idx:])))
		return false
	}
	if f := br.fence; f != nil {
		closeLine := f.indent + f.marker
		reopen := f.openLine + "\n"
		if strings.HasSuffix(f.openLine, "\n") {
			reopen = f.openLine
		}
		rest := c.buf[idx:]
		// Deviation from the reference: when the reopened line is at least
		// as long as the cut, repairing would never shrink the buffer (the
		// reference loops forever); cut without repair instead.
		if len(reopen) < idx {
			if strings.HasSuffix(chunk, "\n") {
				chunk += closeLine + "\n"
			} else {
				chunk += "\n" + closeLine + "\n"
			}
			emit(chunk)
			c.set(reopen + rest)
			return true
		}
	}
	emit(chunk)
	next := idx
	if idx < len(c.buf) {
		if r, size := utf8.DecodeRuneInString(c.buf[idx:]); ecmatext.IsSpace(r) {
			next += size
		}
	}
	c.set(stripLeadingNewlines(c.buf[next:]))
	return true
}

// pick is the normal break picker: the last acceptable break within the
// MaxChars window, by preference, then the last whitespace, then a hard cut
// at MaxChars (closing and reopening a fence cut there).
func (c *Chunker) pick(minOverride int) brk {
	minChars := max(1, minOverride)
	maxChars := max(minChars, c.cfg.MaxChars)
	if c.n < minChars {
		return brk{index: -1}
	}
	buf := c.buf
	off := c.offsets()
	winEnd := len(buf)
	if c.n > maxChars {
		winEnd = off.byteFloor(buf, maxChars)
	}
	window := buf[:winEnd]
	c.spans = parseFences(buf, c.spans)
	spans := c.spans

	if c.pref == BreakParagraph {
		if i := paragraphBreak(window, spans, off, minChars, true); i >= 0 {
			return brk{index: i}
		}
	}
	if c.pref == BreakParagraph || c.pref == BreakNewline {
		if i := newlineBreak(window, spans, off, minChars, true); i >= 0 {
			return brk{index: i}
		}
	}
	if c.pref != BreakNewline {
		if i := sentenceBreak(window, spans, off, minChars); i >= 0 {
			return brk{index: i}
		}
	}
	if c.pref == BreakNewline && c.n < maxChars {
		return brk{index: -1}
	}
	for i := len(window); i > 0; {
		r, size := utf8.DecodeLastRuneInString(window[:i])
		i -= size
		if off.at(i) < minChars {
			break
		}
		if ecmatext.IsSpace(r) && safeBreak(spans, i) {
			return brk{index: i}
		}
	}
	if c.n >= maxChars {
		hard := off.byteFloor(buf, maxChars)
		if hard == 0 {
			// Deviation: a first character wider than MaxChars (a
			// surrogate pair with MaxChars 1) is kept whole.
			_, hard = utf8.DecodeRuneInString(buf)
		}
		return brk{index: hard, fence: fenceAt(spans, hard)}
	}
	return brk{index: -1}
}

// pickSoft is the picker of a forced drain that fits in MaxChars: the first
// acceptable break by preference, with no whitespace or hard fallback.
func (c *Chunker) pickSoft(minOverride int) brk {
	minChars := max(1, minOverride)
	if c.n < minChars {
		return brk{index: -1}
	}
	buf := c.buf
	off := c.offsets()
	c.spans = parseFences(buf, c.spans)
	spans := c.spans
	if c.pref == BreakParagraph {
		if i := paragraphBreak(buf, spans, off, minChars, false); i >= 0 {
			return brk{index: i}
		}
	}
	if c.pref == BreakParagraph || c.pref == BreakNewline {
		if i := newlineBreak(buf, spans, off, minChars, false); i >= 0 {
			return brk{index: i}
		}
	}
	if c.pref != BreakNewline {
		if i := sentenceBreak(buf, spans, off, minChars); i >= 0 {
			return brk{index: i}
		}
	}
	return brk{index: -1}
}

// paragraphBreak finds a safe break at either newline of a "\n\n" at or
// after minChars: the last one (reverse) or the first one.
func paragraphBreak(text string, spans []fence, off offsets, minChars int, reverse bool) int {
	idx := -1
	if reverse {
		idx = lastDoubleNewline(text)
	} else {
		idx = strings.Index(text, "\n\n")
	}
	for idx >= 0 && (!reverse || off.at(idx) >= minChars) {
		for _, cand := range [2]int{idx, idx + 1} {
			if cand >= len(text) || off.at(cand) < minChars {
				continue
			}
			if safeBreak(spans, cand) {
				return cand
			}
		}
		if reverse {
			if idx == 0 {
				return -1
			}
			idx = lastDoubleNewline(text[:idx+1])
		} else {
			next := strings.Index(text[idx+2:], "\n\n")
			if next < 0 {
				return -1
			}
			idx += 2 + next
		}
	}
	return -1
}

// newlineBreak finds a safe "\n" at or after minChars: the last (reverse) or
// the first.
func newlineBreak(text string, spans []fence, off offsets, minChars int, reverse bool) int {
	if reverse {
		for i := strings.LastIndexByte(text, '\n'); i >= 0 && off.at(i) >= minChars; i = strings.LastIndexByte(text[:i], '\n') {
			if safeBreak(spans, i) {
				return i
			}
		}
		return -1
	}
	for i := strings.IndexByte(text, '\n'); i >= 0; {
		if off.at(i) >= minChars && safeBreak(spans, i) {
			return i
		}
		next := strings.IndexByte(text[i+1:], '\n')
		if next < 0 {
			return -1
		}
		i += 1 + next
	}
	return -1
}

// sentenceBreak finds the last safe position just after ".", "!" or "?"
// followed by whitespace or the end of text, with the punctuation at or after
// minChars.
func sentenceBreak(text string, spans []fence, off offsets, minChars int) int {
	found := -1
	i := 0
	if off.ascii {
		i = min(minChars, len(text))
	}
	for ; i < len(text); i++ {
		ch := text[i]
		if ch != '.' && ch != '!' && ch != '?' {
			continue
		}
		if i+1 < len(text) {
			if r, _ := utf8.DecodeRuneInString(text[i+1:]); !ecmatext.IsSpace(r) {
				continue
			}
		}
		if off.at(i) < minChars {
			continue
		}
		if safeBreak(spans, i+1) {
			found = i + 1
		}
	}
	if found >= 0 && off.at(found) >= minChars {
		return found
	}
	return -1
}

// lastDoubleNewline is strings.LastIndex(s, "\n\n"), scanning backwards for
// newlines with the byte search (the string search has no fast reverse path).
func lastDoubleNewline(s string) int {
	for i := strings.LastIndexByte(s, '\n'); i > 0; i = strings.LastIndexByte(s[:i], '\n') {
		if s[i-1] == '\n' {
			return i - 1
		}
	}
	return -1
}
