package jsonfast

// Valid reports whether data is one JSON value, as encoding/json's Valid
// does (FuzzValid holds the two together), in a single loop without its
// per-byte state functions: a small event checks in a fraction of the
// time, which lets the fast paths read only valid JSON (Members' premise).
func Valid(data []byte) bool {
	// stack holds the open containers, '{' or '['; deeper nesting than
	// it holds is left to encoding/json (reported not valid: the caller
	// then decodes the whole event, which decides).
	var stack [32]byte
	depth := 0
	j := skipSpace(data, 0)
	for {
		// A value at data[j].
		if j >= len(data) {
			return false
		}
		switch c := data[j]; {
		case c == '{' || c == '[':
			if depth == len(stack) {
				return false
			}
			stack[depth] = c
			depth++
			j = skipSpace(data, j+1)
			if j < len(data) && (c == '{' && data[j] == '}' || c == '[' && data[j] == ']') {
				depth--
				j++
				break
			}
			if c == '{' {
				if j = key(data, j); j < 0 {
					return false
				}
			}
			continue
		case c == '"':
			if j = stringEnd(data, j); j < 0 {
				return false
			}
		case c == '-' || c >= '0' && c <= '9':
			if j = numberEnd(data, j); j < 0 {
				return false
			}
		case c == 't':
			if j = literalEnd(data, j, "true"); j < 0 {
				return false
			}
		case c == 'f':
			if j = literalEnd(data, j, "false"); j < 0 {
				return false
			}
		case c == 'n':
			if j = literalEnd(data, j, "null"); j < 0 {
				return false
			}
		default:
			return false
		}
		// After a value: close containers, or go on to the next member.
		for {
			j = skipSpace(data, j)
			if depth == 0 {
				return j == len(data)
			}
			if j >= len(data) {
				return false
			}
			open := stack[depth-1]
			switch c := data[j]; {
			case c == ',':
				j = skipSpace(data, j+1)
				if open == '{' {
					if j = key(data, j); j < 0 {
						return false
					}
				}
			case open == '{' && c == '}' || open == '[' && c == ']':
				depth--
				j++
				continue
			default:
				return false
			}
			break
		}
	}
}

// key reads a member's key and its colon at data[j], returning where its
// value starts, or -1.
func key(data []byte, j int) int {
	if j >= len(data) || data[j] != '"' {
		return -1
	}
	if j = stringEnd(data, j); j < 0 {
		return -1
	}
	j = skipSpace(data, j)
	if j >= len(data) || data[j] != ':' {
		return -1
	}
	return skipSpace(data, j+1)
}

// stringEnd returns the index past the string at data[j], or -1.
func stringEnd(data []byte, j int) int {
	for j++; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return j + 1
		case c < 0x20:
			return -1
		case c == '\\':
			j++
			if j >= len(data) {
				return -1
			}
			switch data[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(data) {
					return -1
				}
				for _, h := range data[j+1 : j+5] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return -1
					}
				}
				j += 4
			default:
				return -1
			}
		}
	}
	return -1
}

// numberEnd returns the index past the number at data[j], or -1.
func numberEnd(data []byte, j int) int {
	if data[j] == '-' {
		j++
	}
	switch {
	case j < len(data) && data[j] == '0':
		j++
	case j < len(data) && data[j] >= '1' && data[j] <= '9':
		j = digits(data, j)
	default:
		return -1
	}
	if j < len(data) && data[j] == '.' {
		k := digits(data, j+1)
		if k == j+1 {
			return -1
		}
		j = k
	}
	if j < len(data) && (data[j] == 'e' || data[j] == 'E') {
		j++
		if j < len(data) && (data[j] == '+' || data[j] == '-') {
			j++
		}
		k := digits(data, j)
		if k == j {
			return -1
		}
		j = k
	}
	return j
}

func digits(data []byte, j int) int {
	for j < len(data) && data[j] >= '0' && data[j] <= '9' {
		j++
	}
	return j
}

// literalEnd returns the index past lit at data[j], or -1.
func literalEnd(data []byte, j int, lit string) int {
	if len(data)-j < len(lit) || string(data[j:j+len(lit)]) != lit {
		return -1
	}
	return j + len(lit)
}
