package netguard

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// TestDefaultPolicy: the SSRF table. Every address and host a fetch could
// be steered to inside the worker's network is refused by default; public
// addresses and names pass.
func TestDefaultPolicy(t *testing.T) {
	t.Parallel()
	var p Policy
	for _, tc := range []struct {
		host string
		want string // "" = allowed; else a word of the reason
	}{
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "unspecified"},
		{"::1", "loopback"},
		{"::", "unspecified"},
		{"169.254.169.254", "metadata"},
		{"169.254.1.1", "link-local"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "zone"},
		{"10.0.0.1", "RFC 1918"},
		{"172.16.5.4", "RFC 1918"},
		{"172.31.255.255", "RFC 1918"},
		{"192.168.1.1", "RFC 1918"},
		{"100.64.0.1", "CGNAT"},
		{"100.127.255.255", "CGNAT"},
		{"fc00::1", "unique local"},
		{"fd12:3456::1", "unique local"},
		{"::ffff:127.0.0.1", "IPv4-mapped loopback"},
		{"::ffff:169.254.169.254", "IPv4-mapped link-local cloud metadata"},
		{"::ffff:10.1.2.3", "IPv4-mapped private"},
		{"::127.0.0.1", "IPv4-compatible"},
		{"64:ff9b::127.0.0.1", "NAT64 loopback"},
		{"64:ff9b::10.0.0.1", "NAT64 private"},
		{"224.0.0.1", "multicast"},
		{"ff02::1", "multicast"},
		{"255.255.255.255", "broadcast"},
		{"240.0.0.1", "class E"},
		{"192.0.2.1", "documentation"},
		{"2001:db8::1", "documentation"},
		// Numeric forms Go reads as names but browsers and inet_aton as
		// 127.0.0.1: refused as ambiguous.
		{"2130706433", "numeric"},
		{"0177.0.0.1", "numeric"},
		{"0x7f.0.0.1", "numeric"},
		{"0x7f000001", "numeric"},
		{"127.1", "numeric"},
		{"017700000001", "numeric"},
		{"127.0.0.1.", "loopback"}, // a final dot: still the literal
		{"１２７.０.０.１", "loopback"},  // full-width digits map to the literal
		{"example.123", "numeric"},
		{"", "no host"},
		{"bad host", "not a valid host name"},
		{"a..b", "empty label"},
		{strings.Repeat("a", 64) + ".com", "longer than 63"},
		// Allowed.
		{"93.184.215.14", ""},
		{"2606:4700::6810:84e5", ""},
		{"::ffff:93.184.215.14", ""},
		{"64:ff9b::93.184.215.14", ""},
		{"example.com", ""},
		{"EXAMPLE.com.", ""},
		{"0x7f.example.com", ""}, // the last label is not numeric
		{"bücher.example", ""},
		{"localhost", ""}, // a name: its addresses are checked when dialled
	} {
		_, err := p.CheckHost(tc.host)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q refused: %v", tc.host, err)
		case tc.want != "" && err == nil:
			t.Errorf("%q allowed, want refused (%s)", tc.host, tc.want)
		case tc.want != "" && (!errors.Is(err, ErrBlocked) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want ErrBlocked mentioning %q", tc.host, err, tc.want)
		}
	}
}

// TestCheckHostCanonical: the accepted forms are what is dialled.
func TestCheckHostCanonical(t *testing.T) {
	t.Parallel()
	var p Policy
	for in, want := range map[string]string{
		"Example.COM":            "example.com",
		"bücher.example":         "xn--bcher-kva.example",
		"2606:4700:0::6810:84e5": "2606:4700::6810:84e5",
	} {
		if got, err := p.CheckHost(in); err != nil || got != want {
			t.Errorf("CheckHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestAllow: the operator's ranges and host names pass; nothing else
// does.
func TestAllow(t *testing.T) {
	t.Parallel()
	p, err := Parse([]string{"10.1.0.0/16", "127.0.0.2", "[::1]", "wiki.internal", "*.corp.example", " "})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"10.1.2.3", true},
		{"::ffff:10.1.2.3", true},
		{"10.2.0.1", false},
		{"127.0.0.2", true},
		{"127.0.0.1", false},
		{"::1", true},
		{"169.254.169.254", false},
	} {
		if err := p.CheckAddr(netip.MustParseAddr(tc.addr)); (err == nil) != tc.ok {
			t.Errorf("CheckAddr(%s) = %v, want allowed %v", tc.addr, err, tc.ok)
		}
	}
	for host, ok := range map[string]bool{
		"wiki.internal": true, "WIKI.internal.": true, "a.wiki.internal": false,
		"x.corp.example": true, "a.b.corp.example": true, "corp.example": false, "evilcorp.example": false,
	} {
		if got := p.AllowsHost(host); got != ok {
			t.Errorf("AllowsHost(%q) = %v, want %v", host, got, ok)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "fe80::1%eth0", "bad host", "*."} {
		if _, err := Parse([]string{bad}); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

// TestControl: the dialer's hook judges the IP it is about to connect to.
func TestControl(t *testing.T) {
	t.Parallel()
	var p Policy
	for addr, ok := range map[string]bool{
		"93.184.215.14:443": true, "127.0.0.1:80": false, "[::1]:80": false,
		"[::ffff:169.254.169.254]:80": false, "example.com:80": false, "garbage": false,
	} {
		if err := p.Control("tcp", addr, nil); (err == nil) != ok {
			t.Errorf("Control(%s) = %v, want allowed %v", addr, err, ok)
		}
	}
}

// FuzzCheckHost: whatever CheckHost accepts is a literal the default
// policy allows or a valid lower-case ASCII name whose last label is not
// numeric.
func FuzzCheckHost(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "2130706433", "0177.0.0.1", "example.com", "::ffff:127.0.0.1", "１２７.０.０.１", "xn--bcher-kva.example", "a.b.c.d"} {
		f.Add(s)
	}
	var p Policy
	f.Fuzz(func(t *testing.T, host string) {
		got, err := p.CheckHost(host)
		if err != nil {
			if !errors.Is(err, ErrBlocked) {
				t.Fatalf("%q: error %v is not ErrBlocked", host, err)
			}
			return
		}
		if a, err := netip.ParseAddr(got); err == nil {
			if why := Classify(a); why != "" {
				t.Fatalf("%q accepted as %s, a %s address", host, got, why)
			}
			return
		}
		name := strings.TrimSuffix(got, ".")
		if numericLast(name) || checkName(name) != nil || strings.ToLower(got) != got {
			t.Fatalf("%q accepted as %q", host, got)
		}
	})
}
