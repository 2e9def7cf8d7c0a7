package redact

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

const key = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv-wxyz"

func TestString(t *testing.T) {
	t.Parallel()
	r := New(key, "short", "pa&ss<wo>rd!", "  ", "abcdefgh", "abcdefghij", "ghijklmn")
	for _, tc := range []struct {
		name, in, want string
	}{
		{"no secret", "hello world", "hello world"},
		{"empty", "", ""},
		{"key in an error body", `{"error":{"message":"invalid x-api-key: ` + key + `"}}`,
			`{"error":{"message":"invalid x-api-key: [redacted]"}}`},
		{"twice, adjacent", key + key + " " + key, "[redacted][redacted] [redacted]"},
		// The marker is fixed: nothing of the secret's length or ends shows.
		{"short secret", "password pa&ss<wo>rd! here", "password [redacted] here"},
		{"json-escaped form", `"pa\u0026ss\u003cwo\u003erd!"`, `"[redacted]"`},
		{"url form", "nats://u:pa%26ss%3Cwo%3Erd%21@host", "nats://u:[redacted]@host"},
		{"too short is left", "short", "short"},
		{"a prefix alone is left", "sk-ant-api03-AbCd", "sk-ant-api03-AbCd"},
		// Of the secrets starting at one place, the longest is masked.
		{"longest at one place", "xabcdefghijx", "x[redacted]x"},
		// The leftmost wins: ghijklmn overlaps abcdefgh's end.
		{"leftmost of overlapping", "abcdefghijklmn", "[redacted]klmn"},
		{"overlap, the later one alone", "zzghijklmn", "zz[redacted]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := r.String(tc.in); got != tc.want {
				t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestAddReportsShortSecrets(t *testing.T) {
	t.Parallel()
	var r Redactor
	if got := r.Add("1234567", "12345678", ""); len(got) != 1 || got[0] != "1234567" {
		t.Fatalf("tooShort = %q", got)
	}
	if got := r.String("a 1234567 b"); got != "a 1234567 b" {
		t.Errorf("a secret under MinLen was masked: %q", got)
	}
	if got := r.String("12345678"); got != Marker {
		t.Errorf("an 8-byte secret was not masked: %q", got)
	}
	var nilR *Redactor
	if nilR.String(key) != key || nilR.Masker(nil).String(key) != key {
		t.Error("a nil Redactor masks nothing")
	}
	if (&Redactor{}).Masker(nil).Stream().Write(key) != key {
		t.Error("a Redactor without secrets holds nothing back")
	}
}

// TestMaskerLeavesSuppliedSecrets: a secret the sender supplied (in any of
// its forms) is shown as it is, the others are masked; the sender's
// content is asked only about secrets found, once each, until Refresh.
func TestMaskerLeavesSuppliedSecrets(t *testing.T) {
	t.Parallel()
	const pw = "nats-pass&word"
	r := New(key, pw, "never-seen-secret")
	sender := []string{`the sender wrote "nats-pass\u0026word" in JSON`}
	var asked []string
	m := r.Masker(func(s string) bool {
		asked = append(asked, s)
		for _, t := range sender {
			if strings.Contains(t, s) {
				return true
			}
		}
		return false
	})
	in := "pw " + pw + ", key " + key + ", pw again " + pw
	want := "pw " + pw + ", key [redacted], pw again " + pw
	if got := m.String(in); got != want {
		t.Fatalf("String = %q, want %q", got, want)
	}
	n := len(asked)
	for _, a := range asked {
		if strings.Contains(a, "never-seen") {
			t.Errorf("asked about %q, a secret the text does not hold", a)
		}
	}
	m.String(in)
	if len(asked) != n {
		t.Errorf("asked %d more times about the same secrets", len(asked)-n)
	}
	// A steered message supplies the key too.
	sender = append(sender, "here it is: "+key)
	if got := m.String(in); got != want {
		t.Errorf("before Refresh: %q", got)
	}
	m.Refresh()
	if got := m.String(in); got != in {
		t.Errorf("after Refresh: %q, want the text as it is", got)
	}
}

func TestPartial(t *testing.T) {
	t.Parallel()
	m := New(key).Masker(nil)
	for _, tc := range []struct{ in, want string }{
		// Up to the last whitespace (no secret holds any), whatever the
		// words are: where a text is cut never says what a secret is.
		{"output so far", "output so "},
		{"token: sk-ant-api", "token: "},
		{"token: " + key + " sz", "token: [redacted] "},
		{"token: " + key + " sk-", "token: [redacted] "},
	} {
		if got := m.Partial(tc.in); got != tc.want {
			t.Errorf("Partial(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestValue(t *testing.T) {
	t.Parallel()
	m := New(key).Masker(nil)
	args := map[string]any{"command": "curl -H 'x-api-key: " + key + "'", "n": 3.0,
		"list": []any{"a", key, map[string]any{key: "b"}}, "env": []string{"K=" + key}, "plain": map[string]any{"x": "y"}}
	got := m.Value(args).(map[string]any)
	if s := fmt.Sprint(got); strings.Contains(s, key) || strings.Count(s, Marker) != 4 {
		t.Errorf("Value = %s", s)
	}
	if got["n"] != 3.0 || fmt.Sprintf("%p", got["plain"]) != fmt.Sprintf("%p", args["plain"]) {
		t.Errorf("what holds no secret changed: %v", got)
	}
	if !strings.Contains(fmt.Sprint(args), key) {
		t.Error("the caller's value was changed in place")
	}
	clean := map[string]any{"path": "a.txt"}
	if fmt.Sprintf("%p", m.Value(clean)) != fmt.Sprintf("%p", clean) {
		t.Error("a value without secrets was copied")
	}
}

// TestStream: what each piece of a streamed text lets out.
func TestStream(t *testing.T) {
	t.Parallel()
	r := New(key, "abcdefgh", "abcdefghij")
	for _, tc := range []struct {
		name   string
		pieces []string
		want   []string // what each Write returns, then Flush
	}{
		// A piece goes out up to its last whitespace; a word waits for
		// the next (or, longer than the lag, goes out but its last lag
		// bytes).
		{"no secret", []string{"hello ", "world"}, []string{"hello ", "", "world"}},
		{"key split in three", []string{"the key is sk-ant-", "api03-AbCdEfGhIjKlMnOp", "QrStUv-wxyz, done"},
			[]string{"the key is ", "", "[redacted], ", "done"}},
		{"a prefix that does not complete", []string{"sk-ant-api", "-03 is no key"}, []string{"", "sk-ant-api-03 is no ", "key"}},
		{"a prefix at the end", []string{"ends with sk-an"}, []string{"ends with ", "sk-an"}},
		{"the longer may follow", []string{"abcdefgh", "ij!"}, []string{"", "", "[redacted]!"}},
		{"the longer does not follow", []string{"abcdefgh", "xy"}, []string{"", "", "[redacted]xy"}},
		{"a long word", []string{strings.Repeat("w", 100) + "é"}, []string{strings.Repeat("w", 102-64), strings.Repeat("w", 62) + "é"}},
		{"the shorter at the end", []string{"abcdefgh"}, []string{"", "[redacted]"}},
		{"one byte at a time", strings.Split("a "+key+" b", ""), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := r.Masker(nil)
			s := m.Stream()
			var got []string
			for _, p := range tc.pieces {
				got = append(got, s.Write(p))
			}
			got = append(got, s.Flush())
			if tc.want != nil && fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
				t.Errorf("pieces %q, want %q", got, tc.want)
			}
			whole := m.String(strings.Join(tc.pieces, ""))
			if strings.Join(got, "") != whole {
				t.Errorf("joined %q, String of the whole %q", strings.Join(got, ""), whole)
			}
		})
	}
}

// TestStreamSplitsTellNothing: where a stream's pieces split depends on
// the text, never on the secrets: a sender streaming guesses (its own
// words, which its run leaves unmasked) sees the same pieces whether a
// guess shares a long prefix with a secret or none. A hold-back that ended
// where the text stopped being a secret's prefix told how much of the
// secret each guess got right.
func TestStreamSplitsTellNothing(t *testing.T) {
	t.Parallel()
	other := "zz-zzz-zzzzz-ZzZzZzZzZzZzZzZzZzZzZz-zzzz" // as long as key
	guess := key[:len(key)-3] + "QQQ"                   // all but the end right
	pieces := []string{"is it ", guess[:10], guess[10:30], guess[30:], " or not"}
	split := func(secret string) []string {
		m := New(secret).Masker(func(string) bool { return false }) // the sender supplied every secret it streams
		s := m.Stream()
		var out []string
		for _, p := range pieces {
			out = append(out, s.Write(p))
		}
		return append(out, s.Flush())
	}
	if a, b := split(key), split(other); fmt.Sprintf("%q", a) != fmt.Sprintf("%q", b) {
		t.Errorf("pieces against the real key %q, against another %q", a, b)
	}
}

func TestWriter(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := New(key, `pa"ss\word`).Writer(&buf)
	line := []byte(`{"level":"warn","error":"401: ` + key + `","pw":"pa\"ss\\word"}` + "\n")
	n, err := w.Write(line)
	if err != nil || n != len(line) {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if want := `{"level":"warn","error":"401: [redacted]","pw":"[redacted]"}` + "\n"; buf.String() != want {
		t.Errorf("log line %s, want %s", buf.String(), want)
	}
}

// FuzzStream: for any text, secrets and split, no piece a Stream lets out
// and no masked text holds a secret (in any of its forms), nothing is held
// back longer than the lag (and a rune's start), and the pieces joined
// are the masked whole text.
func FuzzStream(f *testing.F) {
	f.Add("x "+key+" y", "sk-ant-api03-AbCd", "abcdefghij", uint16(5), uint16(17))
	f.Add("abcdefghijklmn", "abcdefgh", "ghijklmn", uint16(8), uint16(9))
	f.Add("a&b<c>d%e f+g/h", "&b<c>d%e f+g", "<c>d%e f+g/h", uint16(1), uint16(3))
	f.Fuzz(func(t *testing.T, text, s1, s2 string, cut1, cut2 uint16) {
		r := New(s1, s2)
		m := r.Masker(nil)
		whole := m.String(text)
		set := r.load()
		check := func(what, out string) {
			if set == nil {
				return
			}
			// A secret can only show where it is made of the marker's
			// own bytes.
			plain := strings.ReplaceAll(out, Marker, "\x00")
			for _, n := range set.needles {
				if !strings.Contains(n.find, "\x00") && strings.Contains(plain, n.find) {
					t.Fatalf("%s %q holds %q", what, out, n.find)
				}
			}
		}
		check("whole", whole)
		a, b := int(cut1)%(len(text)+1), int(cut2)%(len(text)+1)
		a, b = min(a, b), max(a, b)
		s := m.Stream()
		var joined string
		for _, p := range []string{text[:a], text[a:b], text[b:]} {
			out := s.Write(p)
			check("piece", out)
			joined += out
			check("pieces so far", joined)
			if set != nil && len(s.held) > set.lag+utf8.UTFMax-1 {
				t.Fatalf("held %d bytes, the lag is %d", len(s.held), set.lag)
			}
		}
		joined += s.Flush()
		if joined != whole {
			t.Fatalf("joined %q, whole %q", joined, whole)
		}
		if p := m.Partial(text); !strings.HasPrefix(whole, p) {
			t.Fatalf("Partial %q is not the start of %q", p, whole)
		}
		// A sender that supplied the text's start: the same secrets are
		// left, whole or streamed.
		m = r.Masker(func(f string) bool { return strings.Contains(text[:a], f) })
		s = m.Stream()
		joined = s.Write(text[:b]) + s.Write(text[b:]) + s.Flush()
		if whole := m.String(text); joined != whole {
			t.Fatalf("with a sender: joined %q, whole %q", joined, whole)
		}
	})
}

func BenchmarkString(b *testing.B) {
	secrets := make([]string, 20)
	for i := range secrets {
		secrets[i] = strings.Repeat(string(rune('a'+i)), 40)
	}
	m := New(secrets...).Masker(func(string) bool { return false })
	text := strings.Repeat("a delta of streamed text, ", 40) // ~1 KB, no secret
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		_ = m.String(text)
	}
}

func BenchmarkStream(b *testing.B) {
	secrets := make([]string, 20)
	for i := range secrets {
		secrets[i] = strings.Repeat(string(rune('a'+i)), 40)
	}
	m := New(secrets...).Masker(func(string) bool { return false })
	b.ReportAllocs()
	for b.Loop() {
		s := m.Stream()
		for range 100 {
			_ = s.Write("a token ")
		}
		_ = s.Flush()
	}
}
