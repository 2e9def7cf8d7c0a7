package redact

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

const key = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv-wxyz"

// masked is key as Bytes masks it.
var masked = "sk-" + strings.Repeat("*", len(key)-7) + "wxyz"

func TestBytes(t *testing.T) {
	r := New(key, "short", "pa&ss<wo>rd!", "  ")
	for _, tc := range []struct {
		name, in, want string
	}{
		{"no secret", "hello world", "hello world"},
		{"key in an error body", `{"error":{"message":"invalid x-api-key: ` + key + `"}}`,
			`{"error":{"message":"invalid x-api-key: ` + masked + `"}}`},
		{"twice", key + " " + key, masked + " " + masked},
		{"short secret masked whole", "password pa&ss<wo>rd! here", "password " + stars("pa&ss<wo>rd!") + " here"},
		{"json-escaped form", `"pa\u0026ss\u003cwo\u003erd!"`, `"` + stars(`pa\u0026ss\u003cwo\u003erd!`) + `"`},
		{"url form", "nats://u:pa%26ss%3Cwo%3Erd%21@host", "nats://u:" + stars("pa%26ss%3Cwo%3Erd%21") + "@host"},
		{"too short is left", "short", "short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			got := r.Bytes(in)
			if string(got) != tc.want {
				t.Errorf("Bytes = %q, want %q", got, tc.want)
			}
			if string(in) != tc.in {
				t.Error("the caller's buffer was changed")
			}
			if tc.in == tc.want && &got[0] != &in[0] {
				t.Error("a payload without secrets was copied")
			}
			if s := r.String(tc.in); s != tc.want {
				t.Errorf("String = %q, want %q", s, tc.want)
			}
			if r.Contains(in) != (tc.in != tc.want) {
				t.Errorf("Contains = %v", r.Contains(in))
			}
		})
	}
}

func stars(s string) string { return strings.Repeat("*", len(s)) }

func TestAddReportsShortSecrets(t *testing.T) {
	var r Redactor
	if got := r.Add("1234567", "12345678", ""); len(got) != 1 || got[0] != "1234567" {
		t.Fatalf("tooShort = %q", got)
	}
	if r.Bytes([]byte("a 1234567 b"))[2] != '1' {
		t.Error("a secret under MinLen was masked")
	}
	if string(r.Bytes([]byte("12345678"))) != "********" {
		t.Error("an 8-byte secret was not masked")
	}
	var nilR *Redactor
	if string(nilR.Bytes([]byte(key))) != key || nilR.Len() != 0 {
		t.Error("a nil Redactor masks nothing")
	}
}

// TestMaskKeepsFraming: a masked msgpack or JSON payload still decodes, to
// the same structure with the secret masked.
func TestMaskKeepsFraming(t *testing.T) {
	r := New(key)
	v := map[string]any{"text": "the key is " + key, "n": int64(42), "list": []any{key, "x"}}
	mp, _ := msgpack.Marshal(v)
	var back map[string]any
	if err := msgpack.Unmarshal(r.Bytes(mp), &back); err != nil {
		t.Fatalf("masked msgpack does not decode: %v", err)
	}
	js, _ := json.Marshal(v)
	if err := json.Unmarshal(r.Bytes(js), &back); err != nil {
		t.Fatalf("masked JSON does not decode: %v", err)
	}
	if strings.Contains(back["text"].(string), key) || !strings.HasSuffix(back["text"].(string), "wxyz") {
		t.Errorf("text = %q", back["text"])
	}
}

func TestWriter(t *testing.T) {
	var buf bytes.Buffer
	w := New(key).Writer(&buf)
	line := []byte(`{"level":"warn","error":"401: ` + key + `"}` + "\n")
	n, err := w.Write(line)
	if err != nil || n != len(line) {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if strings.Contains(buf.String(), key) {
		t.Errorf("log line = %s", buf.String())
	}
}

func TestFingerprint(t *testing.T) {
	if got := Fingerprint(key); got != "sk-…wxyz" {
		t.Errorf("Fingerprint = %q", got)
	}
	if got := Fingerprint("12345678"); got != "…" {
		t.Errorf("Fingerprint(short) = %q", got)
	}
}

func FuzzBytes(f *testing.F) {
	f.Add([]byte("x "+key+" y"), "sk-ant-api03-AbCd")
	f.Fuzz(func(t *testing.T, data []byte, secret string) {
		r := New(secret)
		out := r.Bytes(data)
		if len(out) != len(data) {
			t.Fatalf("length changed: %d -> %d", len(data), len(out))
		}
		if s := strings.TrimSpace(secret); len(s) >= MinLen && bytes.Contains(out, []byte(s)) {
			// A mask can only reintroduce the secret if the secret is
			// made of '*' and its kept ends.
			if strings.Trim(s, "*") != "" {
				t.Fatalf("secret %q survives in %q", s, out)
			}
		}
	})
}

func BenchmarkBytes(b *testing.B) {
	secrets := make([]string, 20)
	for i := range secrets {
		secrets[i] = strings.Repeat(string(rune('a'+i)), 40)
	}
	r := New(secrets...)
	frame := bytes.Repeat([]byte("a delta of streamed text, "), 40) // ~1 KB, no secret
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		_ = r.Bytes(frame)
	}
}
