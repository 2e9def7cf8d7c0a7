package events

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestKeyToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, key, token string
		err              error
	}{
		{"plain key is its own token", "alice", "alice", nil},
		{"plain alphabet with dash and underscore", "a-b_C9", "a-b_C9", nil},
		{"64 plain chars stay plain", strings.Repeat("a", 64), strings.Repeat("a", 64), nil},
		{"65 plain chars get encoded", strings.Repeat("a", 65), "=" + b64.EncodeToString([]byte(strings.Repeat("a", 65))), nil},
		{"colons are encoded", "agent:main:telegram:dm:42", "=YWdlbnQ6bWFpbjp0ZWxlZ3JhbTpkbTo0Mg", nil},
		{"dot cannot split the subject", "a.b", "=YS5i", nil},
		{"wildcard star cannot inject", "*", "=Kg", nil},
		{"wildcard gt cannot inject", ">", "=Pg", nil},
		{"spaces are encoded", "a b", "=YSBi", nil},
		{"a key that looks encoded is encoded again", "=YS5i", "=PVlTNWk", nil},
		{"unicode", "日本", "=5pel5pys", nil},
		{"empty", "", "", ErrEmptyKey},
		{"too long", strings.Repeat("x", 257), "", ErrKeyTooLong},
		{"256 bytes is fine", strings.Repeat("é", 128), "=" + b64.EncodeToString([]byte(strings.Repeat("é", 128))), nil},
		{"invalid utf-8", "a\xffb", "", ErrKeyUTF8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tok, err := KeyToken(tt.key)
			if !errors.Is(err, tt.err) {
				t.Fatalf("KeyToken(%q) err = %v, want %v", tt.key, err, tt.err)
			}
			if err != nil {
				return
			}
			if tok != tt.token {
				t.Fatalf("KeyToken(%q) = %q, want %q", tt.key, tok, tt.token)
			}
			back, err := TokenKey(tok)
			if err != nil || back != tt.key {
				t.Fatalf("TokenKey(%q) = %q, %v; want %q", tok, back, err, tt.key)
			}
		})
	}
}

func TestTokenKeyRejectsNonCanonical(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, token string }{
		{"empty", ""},
		{"bare prefix", "="},
		{"bad base64", "=!!"},
		{"padding is not canonical", "=YS5i=="},
		{"encoding of a plain key", "=YWxpY2U"}, // "alice"
		{"dot", "a.b"},
		{"wildcard", "*"},
		{"decodes to invalid utf-8", "=_w"},
		{"non-canonical trailing bits", "=YS5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if k, err := TokenKey(tt.token); err == nil {
				t.Fatalf("TokenKey(%q) = %q, want an error", tt.token, k)
			}
		})
	}
}

func TestLaneOf(t *testing.T) {
	t.Parallel()
	tok, key, err := LaneOf("agent.in.=YS5i")
	if err != nil || tok != "=YS5i" || key != "a.b" {
		t.Fatalf("LaneOf = %q %q %v", tok, key, err)
	}
	for _, bad := range []string{"agent.in.", "agent.in.a.b", "agent.ev.a", "agent.in.=!!"} {
		if _, _, err := LaneOf(bad); !errors.Is(err, ErrBadToken) {
			t.Errorf("LaneOf(%q) err = %v, want ErrBadToken", bad, err)
		}
	}
}

func FuzzKeyToken(f *testing.F) {
	for _, s := range []string{"alice", "a.b", "*", ">", "agent:main:x", "=YS5i", "日本", strings.Repeat("a", 65)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		tok, err := KeyToken(key)
		if err != nil {
			if ValidateKey(key) == nil {
				t.Fatalf("valid key %q rejected: %v", key, err)
			}
			return
		}
		if tok == "" || strings.ContainsAny(tok, ".*> \t\r\n") || !utf8.ValidString(tok) {
			t.Fatalf("token %q of %q is not subject-safe", tok, key)
		}
		back, err := TokenKey(tok)
		if err != nil || back != key {
			t.Fatalf("round trip %q -> %q -> %q, %v", key, tok, back, err)
		}
		// A token decodes to at most one key, and that key encodes back to it.
		if k2, err := TokenKey(key); err == nil {
			if t2, _ := KeyToken(k2); t2 != key {
				t.Fatalf("token %q decodes to %q which encodes to %q", key, k2, t2)
			}
		}
	})
}

func BenchmarkKeyToken(b *testing.B) {
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = KeyToken("session-12345")
		}
	})
	b.Run("encoded", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = KeyToken("agent:main:telegram:dm:123456789")
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = TokenKey("=YWdlbnQ6bWFpbjp0ZWxlZ3JhbTpkbTo0Mg")
		}
	})
}

// TestFingerprint: stable, short, and not the key.
func TestFingerprint(t *testing.T) {
	t.Parallel()
	a, b := Fingerprint("agent:main:telegram:dm:42"), Fingerprint("agent:main:telegram:dm:43")
	if len(a) != 12 || a == b || a != Fingerprint("agent:main:telegram:dm:42") || Fingerprint("alice") == "alice" {
		t.Fatalf("fingerprints %q %q", a, b)
	}
	if got := Fingerprint("alice"); got != "2bd806c97f0e" {
		t.Fatalf("Fingerprint(alice) = %q (sha256 prefix)", got)
	}
}

// TestKeyDirName: a key's directory is named by its token while that fits
// a file name (existing workspaces keep their directory), by a digest with
// a readable prefix beyond (a 191-byte key's token is 256 bytes: mkdir
// failed with "file name too long" and every message was dead-lettered).
func TestKeyDirName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 191)
	tests := []struct {
		name, key, want string
	}{
		{"plain key", "alice", "alice"},
		{"encoded key", "agent:main:telegram:dm:42", "=YWdlbnQ6bWFpbjp0ZWxlZ3JhbTpkbTo0Mg"},
		{"190 bytes: a 255-byte token", strings.Repeat("x", 190), "=" + b64.EncodeToString([]byte(strings.Repeat("x", 190)))},
		{"191 bytes: digest", long, "+" + strings.Repeat("x", 48) + "+" + sha256hex(long)},
		{"readable prefix", "agent:main:" + long, "+agent_main_" + strings.Repeat("x", 37) + "+" + sha256hex("agent:main:"+long)},
		{"256 bytes of é", strings.Repeat("é", 128), "+" + strings.Repeat("_", 48) + "+" + sha256hex(strings.Repeat("é", 128))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := KeyDirName(tt.key)
			if err != nil || got != tt.want {
				t.Fatalf("KeyDirName(%d bytes) = %q, %v; want %q", len(tt.key), got, err, tt.want)
			}
		})
	}
	if _, err := KeyDirName(""); !errors.Is(err, ErrEmptyKey) {
		t.Fatalf("empty key: %v", err)
	}
}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// FuzzKeyDirName: every valid key names a directory that can be made, and
// two keys never share one.
func FuzzKeyDirName(f *testing.F) {
	for _, k := range []string{"alice", "a.b", strings.Repeat("x", 190), strings.Repeat("x", 191), strings.Repeat("é", 128), "+x+", ".."} {
		f.Add(k, k+"x")
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, a, b string) {
		na, errA := KeyDirName(a)
		nb, errB := KeyDirName(b)
		if errA != nil || errB != nil {
			if (errA == nil) != (ValidateKey(a) == nil) || (errB == nil) != (ValidateKey(b) == nil) {
				t.Fatalf("KeyDirName and ValidateKey disagree: %v, %v", errA, errB)
			}
			return
		}
		if a != b && na == nb {
			t.Fatalf("keys %q and %q share directory %q", a, b, na)
		}
		if len(na) > MaxDirName || na == "." || na == ".." || strings.ContainsAny(na, "/\x00") {
			t.Fatalf("KeyDirName(%q) = %q: not a file name", a, na)
		}
		if na[0] != '+' {
			if k, err := TokenKey(na); err != nil || k != a {
				t.Fatalf("KeyDirName(%q) = %q is a token of %q, %v", a, na, k, err)
			}
		}
		if err := os.Mkdir(filepath.Join(dir, na), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			t.Fatalf("mkdir %q: %v", na, err)
		}
	})
}

func TestKeyInScope(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		key            string
		prefixes, keys []string
		want           bool
	}{
		{"acme:1", []string{"acme:"}, nil, true},
		{"acme:1", []string{"globex:"}, nil, false},
		{"acme", []string{"acme:"}, nil, false},
		{"anything", []string{""}, nil, true},
		{"alice", nil, []string{"alice"}, true},
		{"alice2", nil, []string{"alice"}, false},
		{"alice", nil, nil, false},
		{"bob", []string{"acme:"}, []string{"bob"}, true},
	} {
		if got := KeyInScope(c.key, c.prefixes, c.keys); got != c.want {
			t.Errorf("KeyInScope(%q, %q, %q) = %v, want %v", c.key, c.prefixes, c.keys, got, c.want)
		}
	}
}
