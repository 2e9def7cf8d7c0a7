package netguard

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/net/idna"
)

// Host name bounds (RFC 1035).
const (
	maxName  = 253
	maxLabel = 63
)

// CheckHost validates the host of a URL (without brackets or port) before
// anything is resolved or dialled, and returns its canonical form: a
// lower-case ASCII name (internationalised names in their punycode form)
// or an IP literal. It refuses:
//
//   - IP literals the policy refuses (127.0.0.1, [::1], [::ffff:127.0.0.1])
//     and IPv6 literals with a zone;
//   - numeric hosts that are not a plain dotted quad: WHATWG URL parsing
//     (browsers) and inet_aton (the C resolver) read a host whose last label
//     is a number as an IPv4 address — 2130706433, 0177.0.0.1, 0x7f.1,
//     127.1 are all 127.0.0.1 — while Go reads them as names; such a host
//     is ambiguous and never guessed at;
//   - names with characters outside letters, digits, '-', '_' and '.', or
//     with empty or over-long labels.
//
// A name's addresses are checked when it is dialled ([Policy.Control]).
func (p Policy) CheckHost(host string) (string, error) {
	if host == "" {
		return "", &BlockedError{Host: host, Reason: "the URL has no host"}
	}
	if strings.ContainsAny(host, "%") && strings.Contains(host, ":") {
		return "", &BlockedError{Host: host, Reason: "an IPv6 address with a zone"}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if err := p.CheckAddr(a); err != nil {
			var be *BlockedError
			if errors.As(err, &be) {
				be.Host = host
			}
			return "", err
		}
		return a.String(), nil
	}
	if strings.Contains(host, ":") {
		return "", &BlockedError{Host: host, Reason: "not a valid IPv6 address"}
	}
	ascii, err := idna.Lookup.ToASCII(host)
	if err != nil {
		return "", &BlockedError{Host: host, Reason: fmt.Sprintf("not a valid host name (%v)", err)}
	}
	ascii = strings.ToLower(ascii)
	// The IDNA mapping turns full-width digits and dots into ASCII ones,
	// and a final dot is allowed: check the result as a literal again.
	name := strings.TrimSuffix(ascii, ".")
	if a, err := netip.ParseAddr(name); err == nil && a.Is4() {
		return p.CheckHost(a.String())
	}
	if numericLast(name) {
		return "", &BlockedError{Host: host, Reason: "a numeric host that is not a dotted-quad IPv4 address (such as 2130706433, 0177.0.0.1 or 127.1) is read differently by browsers, resolvers and Go; give the address as a.b.c.d"}
	}
	if err := checkName(name); err != nil {
		return "", &BlockedError{Host: host, Reason: err.Error()}
	}
	return ascii, nil
}

// numericLast reports whether the last label of name is a number as the
// WHATWG URL standard's "ends in a number" checker reads it: all decimal
// digits, or "0x" followed by hex digits.
func numericLast(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	if last == "" {
		return false
	}
	if h, ok := strings.CutPrefix(last, "0x"); ok {
		return strings.Trim(h, "0123456789abcdef") == ""
	}
	return strings.Trim(last, "0123456789") == ""
}

// checkName checks the syntax of a lower-case ASCII host name without its
// final dot.
func checkName(name string) error {
	if name == "" {
		return errors.New("empty host name")
	}
	if len(name) > maxName {
		return fmt.Errorf("host name longer than %d bytes", maxName)
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" {
			return errors.New("host name with an empty label")
		}
		if len(label) > maxLabel {
			return fmt.Errorf("host name label longer than %d bytes", maxLabel)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("host name with the character %q", c)
			}
		}
	}
	return nil
}
