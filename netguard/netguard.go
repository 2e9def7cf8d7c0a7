// Package netguard decides which network addresses the worker's outbound
// fetches (the web_fetch tool) may reach: the SSRF guard. It is a pure
// policy — values in, a verdict out — plus [Policy.Control], the hook a
// net.Dialer calls with the address it is about to connect to, so the
// check is made on the IP actually dialled (after DNS, which covers DNS
// rebinding), not on the name a URL gave.
//
// By default only global unicast addresses pass: loopback, unspecified
// (0.0.0.0, ::), link-local (169.254/16 with the cloud metadata address
// 169.254.169.254, fe80::/10), private (RFC 1918, fc00::/7), CGNAT
// (100.64/10), multicast, broadcast, the IETF and documentation ranges,
// the NAT64 well-known prefix 64:ff9b::/96 and IPv4-mapped or -compatible
// IPv6 forms of any refused IPv4 address are refused. An operator may
// allow ranges and host names ([Policy.Allow], [Policy.AllowHosts]).
//
// Hosts are checked before any connection too ([Policy.CheckHost]): a URL
// host in a numeric form that browsers and resolvers read as an IPv4
// address but Go does not (2130706433, 0177.0.0.1, 0x7f.1) is refused as
// ambiguous rather than guessed at.
//
// Files: netguard.go holds the policy, host.go the host name rules.
package netguard

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
)

// ErrBlocked is wrapped by every refusal of an address or a host.
var ErrBlocked = errors.New("netguard: blocked")

// BlockedError says which address or host was refused and why.
type BlockedError struct {
	Host   string     // the host name or literal as given; may be ""
	Addr   netip.Addr // the refused address; invalid for a refused host
	Reason string     // e.g. "loopback", "private (RFC 1918)"
}

func (e *BlockedError) Error() string {
	switch {
	case e.Addr.IsValid() && e.Host != "" && e.Host != e.Addr.String():
		return fmt.Sprintf("%s resolves to %s, a %s address, which this worker does not fetch from", e.Host, e.Addr, e.Reason)
	case e.Addr.IsValid():
		return fmt.Sprintf("%s is a %s address, which this worker does not fetch from", e.Addr, e.Reason)
	}
	return fmt.Sprintf("host %q refused: %s", e.Host, e.Reason)
}

// Unwrap makes a BlockedError match ErrBlocked.
func (e *BlockedError) Unwrap() error { return ErrBlocked }

// Policy is the operator's exceptions to the default refusals. The zero
// Policy allows only global unicast addresses.
type Policy struct {
	// Allow are address ranges that pass even though they would be
	// refused (an intranet's 10.1.0.0/16).
	Allow []netip.Prefix
	// AllowHosts are host names whose every address passes: an exact
	// name ("wiki.internal") or a suffix pattern ("*.corp.example"). A
	// name is compared in its lower-case ASCII form without a final dot.
	AllowHosts []string
}

// Parse builds a Policy from the operator's entries, each a CIDR range
// ("10.0.0.0/8"), a single address ("192.168.1.5", "::1") or a host name
// pattern ("wiki.internal", "*.corp.example").
func Parse(entries []string) (Policy, error) {
	var p Policy
	for _, e := range entries {
		e = strings.TrimSpace(e)
		switch {
		case e == "":
			continue
		case strings.Contains(e, "/"):
			pfx, err := netip.ParsePrefix(e)
			if err != nil {
				return Policy{}, fmt.Errorf("netguard: allow %q: %w", e, err)
			}
			p.Allow = append(p.Allow, pfx.Masked())
		default:
			if a, err := netip.ParseAddr(strings.Trim(e, "[]")); err == nil {
				if a.Zone() != "" {
					return Policy{}, fmt.Errorf("netguard: allow %q: an address with a zone", e)
				}
				p.Allow = append(p.Allow, netip.PrefixFrom(a, a.BitLen()))
				continue
			}
			name, wild := strings.CutPrefix(strings.ToLower(strings.TrimSuffix(e, ".")), "*.")
			if err := checkName(name); err != nil {
				return Policy{}, fmt.Errorf("netguard: allow %q: %w", e, err)
			}
			if wild {
				name = "*." + name
			}
			p.AllowHosts = append(p.AllowHosts, name)
		}
	}
	return p, nil
}

// AllowsHost reports whether host (an ASCII name) is one of AllowHosts.
func (p Policy) AllowsHost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "" {
		return false
	}
	for _, pat := range p.AllowHosts {
		if suffix, ok := strings.CutPrefix(pat, "*."); ok {
			if strings.HasSuffix(h, "."+suffix) {
				return true
			}
		} else if h == pat {
			return true
		}
	}
	return false
}

// CheckAddr returns nil when a may be connected to, else a *BlockedError
// naming the range it falls in.
func (p Policy) CheckAddr(a netip.Addr) error {
	if !a.IsValid() {
		return &BlockedError{Addr: a, Reason: "invalid"}
	}
	a = a.WithZone("")
	for _, pfx := range p.Allow {
		if pfx.Contains(a) || (a.Is4In6() && pfx.Contains(a.Unmap())) {
			return nil
		}
	}
	if why := Classify(a); why != "" {
		return &BlockedError{Addr: a, Reason: why}
	}
	return nil
}

// Control is a net.Dialer Control function: it refuses, before the
// connection is made, an address the policy refuses. address is the
// "ip:port" the dialer resolved; anything else (a name) is refused.
func (p Policy) Control(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%w: dial address %q: %v", ErrBlocked, address, err)
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%w: dial address %q is not an IP address", ErrBlocked, address)
	}
	return p.CheckAddr(a)
}

// special is one refused range and why.
type special struct {
	pfx    netip.Prefix
	reason string
}

// refused are the ranges outside global unicast, most specific first where
// they overlap.
var refused = func() []special {
	rows := []struct{ cidr, reason string }{
		{"0.0.0.0/8", "unspecified (\"this network\")"},
		{"10.0.0.0/8", "private (RFC 1918)"},
		{"100.64.0.0/10", "shared (CGNAT, RFC 6598)"},
		{"127.0.0.0/8", "loopback"},
		{"169.254.169.254/32", "link-local cloud metadata"},
		{"169.254.0.0/16", "link-local"},
		{"172.16.0.0/12", "private (RFC 1918)"},
		{"192.0.0.0/24", "IETF protocol assignment"},
		{"192.0.2.0/24", "documentation (TEST-NET-1)"},
		{"192.88.99.0/24", "6to4 relay anycast"},
		{"192.168.0.0/16", "private (RFC 1918)"},
		{"198.18.0.0/15", "benchmarking (RFC 2544)"},
		{"198.51.100.0/24", "documentation (TEST-NET-2)"},
		{"203.0.113.0/24", "documentation (TEST-NET-3)"},
		{"224.0.0.0/4", "multicast"},
		{"255.255.255.255/32", "broadcast"},
		{"240.0.0.0/4", "reserved (class E)"},
		{"::/128", "unspecified"},
		{"::1/128", "loopback"},
		{"::/96", "IPv4-compatible (deprecated)"},
		{"64:ff9b:1::/48", "NAT64 local-use"},
		{"100::/64", "discard-only"},
		{"2001:db8::/32", "documentation"},
		{"2001::/32", "Teredo"},
		{"2002::/16", "6to4"},
		{"fc00::/7", "unique local (fc00::/7)"},
		{"fe80::/10", "link-local"},
		{"fec0::/10", "site-local"},
		{"ff00::/8", "multicast"},
	}
	out := make([]special, len(rows))
	for i, r := range rows {
		out[i] = special{netip.MustParsePrefix(r.cidr), r.reason}
	}
	return out
}()

// Classify names the refused range a falls in, or "" for an address the
// default policy lets through. An IPv4-mapped IPv6 address
// (::ffff:a.b.c.d) and a NAT64 one of the well-known prefix
// (64:ff9b::a.b.c.d) are judged by the IPv4 address they carry.
func Classify(a netip.Addr) string {
	a = a.WithZone("")
	if a.Is4In6() {
		if why := Classify(a.Unmap()); why != "" {
			return "IPv4-mapped " + why
		}
		return ""
	}
	if nat64.Contains(a) {
		b := a.As16()
		if why := Classify(netip.AddrFrom4([4]byte(b[12:]))); why != "" {
			return "NAT64 " + why
		}
		return ""
	}
	for _, s := range refused {
		if s.pfx.Contains(a) {
			return s.reason
		}
	}
	return ""
}

// nat64 is the NAT64 well-known prefix (RFC 6052).
var nat64 = netip.MustParsePrefix("64:ff9b::/96")
