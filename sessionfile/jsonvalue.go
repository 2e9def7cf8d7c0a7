package sessionfile

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/ecmatext"
)

// parseJSON decodes one JSON value into the generic form message.EntryFromMap
// takes: nil, bool, string, int64 for integers that fit, float64 for other
// numbers, []any and map[string]any. It follows encoding/json (the reference
// behaviour of message.Entry.UnmarshalJSON) exactly: invalid UTF-8 and lone
// surrogates become U+FFFD, later duplicate keys win, a number out of float64
// range is kept as its literal string. It is a single pass over data, about
// three times faster than json.Unmarshal into any for session lines.
func parseJSON(data []byte) (any, error) {
	p := parser{data: data}
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.pos != len(p.data) {
		return nil, p.errorf("trailing data after JSON value")
	}
	return v, nil
}

const maxDepth = 10000

type parser struct {
	data []byte
	pos  int
	buf  []byte // scratch for strings with escapes
	// ordered makes objects *ecmatext.Object and numbers ecmatext.Number,
	// keeping what JavaScript's JSON.stringify needs to write a line back.
	ordered bool
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("json: offset %d: %s", p.pos, fmt.Sprintf(format, args...))
}

var errEOF = errors.New("json: unexpected end of input")

func (p *parser) space() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) (any, error) {
	if depth > maxDepth {
		return nil, p.errorf("exceeded max depth")
	}
	p.space()
	if p.pos >= len(p.data) {
		return nil, errEOF
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		return p.str()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	default:
		return nil, p.errorf("invalid character %q looking for beginning of value", c)
	}
}

func (p *parser) literal(lit string) error {
	if len(p.data)-p.pos < len(lit) || string(p.data[p.pos:p.pos+len(lit)]) != lit {
		return p.errorf("invalid literal")
	}
	p.pos += len(lit)
	return nil
}

func (p *parser) object(depth int) (any, error) {
	p.pos++ // {
	var m map[string]any
	var o *ecmatext.Object
	if p.ordered {
		o = &ecmatext.Object{}
	} else {
		m = make(map[string]any, 8)
	}
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		if o != nil {
			return o, nil
		}
		return m, nil
	}
	for {
		p.space()
		if p.pos >= len(p.data) {
			return nil, errEOF
		}
		if p.data[p.pos] != '"' {
			return nil, p.errorf("invalid character %q looking for beginning of object key string", p.data[p.pos])
		}
		k, err := p.key()
		if err != nil {
			return nil, err
		}
		p.space()
		if p.pos >= len(p.data) {
			return nil, errEOF
		}
		if p.data[p.pos] != ':' {
			return nil, p.errorf("invalid character %q after object key", p.data[p.pos])
		}
		p.pos++
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		if o != nil {
			o.Set(k, v)
		} else {
			m[k] = v
		}
		p.space()
		if p.pos >= len(p.data) {
			return nil, errEOF
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			if o != nil {
				return o, nil
			}
			return m, nil
		default:
			return nil, p.errorf("invalid character %q after object key:value pair", p.data[p.pos])
		}
	}
}

func (p *parser) array(depth int) (any, error) {
	p.pos++ // [
	a := make([]any, 0, 4)
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return a, nil
	}
	for {
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		p.space()
		if p.pos >= len(p.data) {
			return nil, errEOF
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return a, nil
		default:
			return nil, p.errorf("invalid character %q after array element", p.data[p.pos])
		}
	}
}

// knownKeys are the object keys of session lines, shared instead of
// allocated for every line.
var knownKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		"type", "id", "parentId", "timestamp", "version", "cwd", "message", "role", "content",
		"text", "textSignature", "thinking", "thinkingSignature", "redacted", "data", "mimeType",
		"name", "arguments", "thoughtSignature", "partialJson", "api", "provider", "model", "usage",
		"input", "output", "cacheRead", "cacheWrite", "totalTokens", "cost", "total", "stopReason",
		"errorMessage", "toolCallId", "toolName", "details", "isError", "customType", "display",
		"summary", "firstKeptEntryId", "tokensBefore", "fromId", "fromHook", "modelId",
		"thinkingLevel", "targetId", "label", "path", "command",
	} {
		m[k] = k
	}
	return m
}()

// key decodes an object key, reusing the string of a known key.
func (p *parser) key() (string, error) {
	if end := p.pos + 1; end < len(p.data) {
		for i := end; i < len(p.data) && i-end < 32; i++ {
			c := p.data[i]
			if c == '"' {
				if k, ok := knownKeys[string(p.data[end:i])]; ok {
					p.pos = i + 1
					return k, nil
				}
				break
			}
			if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
				break
			}
		}
	}
	return p.str()
}

// str decodes the string starting at p.pos (a '"').
func (p *parser) str() (string, error) {
	p.pos++
	start := p.pos
	// Fast path: printable ASCII without escapes.
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		if c == '"' {
			s := string(p.data[start:p.pos])
			p.pos++
			return s, nil
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
		p.pos++
	}
	b := append(p.buf[:0], p.data[start:p.pos]...)
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			p.buf = b
			return string(b), nil
		case c < 0x20:
			return "", p.errorf("invalid character %q in string literal", c)
		case c == '\\':
			if p.pos+1 >= len(p.data) {
				return "", errEOF
			}
			e := p.data[p.pos+1]
			p.pos += 2
			switch e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", p.errorf("invalid escape in string literal")
				}
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if p.pos+1 < len(p.data) && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
						save := p.pos
						p.pos += 2
						var ok2 bool
						r2, ok2 = p.hex4()
						if !ok2 {
							return "", p.errorf("invalid escape in string literal")
						}
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							b = utf8.AppendRune(b, dec)
							continue
						}
						// Not a pair: the first is replaced, the second
						// is decoded on its own.
						p.pos = save
					}
					if p.ordered {
						// JavaScript keeps a lone surrogate; carry it as
						// its WTF-8 bytes for writeJSString.
						b = append(b, 0xED, byte(0x80|(r>>6)&0x3F), byte(0x80|r&0x3F))
						continue
					}
					r = utf8.RuneError
				}
				b = utf8.AppendRune(b, r)
			default:
				return "", p.errorf("invalid escape character %q in string literal", e)
			}
		case c < utf8.RuneSelf:
			b = append(b, c)
			p.pos++
		default:
			r, size := utf8.DecodeRune(p.data[p.pos:])
			p.pos += size
			if r == utf8.RuneError && size == 1 {
				b = utf8.AppendRune(b, utf8.RuneError)
			} else {
				b = append(b, p.data[p.pos-size:p.pos]...)
			}
		}
	}
	return "", errEOF
}

func (p *parser) hex4() (rune, bool) {
	if len(p.data)-p.pos < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.data[p.pos : p.pos+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r*16 + rune(c)
	}
	p.pos += 4
	return r, true
}

func (p *parser) number() (any, error) {
	start := p.pos
	d := p.data
	i := p.pos
	if d[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(d) && d[i] == '0' {
		i++
	} else if digits() == 0 {
		p.pos = i
		return nil, p.errorf("invalid number")
	}
	integer := true
	if i < len(d) && d[i] == '.' {
		i++
		integer = false
		if digits() == 0 {
			p.pos = i
			return nil, p.errorf("invalid number")
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		integer = false
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if digits() == 0 {
			p.pos = i
			return nil, p.errorf("invalid number")
		}
	}
	p.pos = i
	lit := string(d[start:i])
	if p.ordered {
		return ecmatext.Number(lit), nil
	}
	if integer {
		if n, err := strconv.ParseInt(lit, 10, 64); err == nil {
			return n, nil
		}
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		return lit, nil
	}
	return f, nil
}

// set adds a key, or replaces the value of a key seen before while keeping
// its place, as JSON.parse does.
