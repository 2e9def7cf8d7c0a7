package remote

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/tools"
)

func TestValidName(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"read":                   true,
		"web_search-2":           true,
		strings.Repeat("a", 64):  true,
		"":                       false,
		strings.Repeat("a", 65):  false,
		"fs.read":                false, // a dot would add a subject token
		"read*":                  false, // wildcards
		"read>":                  false,
		"read file":              false,
		"lecture_é":              false, // ASCII only
		"read\n":                 false,
		"$SRV":                   false,
		"agent.tool.read":        false,
		"ReadFile_v2-beta_12345": true,
	} {
		if got := ValidName(name); got != want {
			t.Errorf("ValidName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestEncodeResultFits(t *testing.T) {
	t.Parallel()
	const maxBytes = 64 << 10
	for _, tc := range []struct {
		name     string
		res      tools.Result
		maxChars int
		cut      bool // the text must come back cut
		tooLarge bool
	}{
		{"small", tools.TextResult("hello"), 1000, false, false},
		{"empty", tools.Result{}, 1000, false, false},
		// Over maxChars but within maxBytes: cut to maxChars.
		{"over chars", tools.TextResult(strings.Repeat("x", 30_000)), 10_000, true, false},
		// Within maxChars but over maxBytes: cut further to fit.
		{"over bytes", tools.TextResult(strings.Repeat("x", 100_000)), 400_000, true, false},
		// Three bytes per char, escaped characters six bytes each.
		{"wide text", tools.TextResult(strings.Repeat("漢", 50_000)), 400_000, true, false},
		{"escaped text", tools.TextResult(strings.Repeat("<", 50_000)), 400_000, true, false},
		{"several blocks", tools.Result{Content: []message.Block{
			message.Text(strings.Repeat("a", 60_000)), message.Text(strings.Repeat("b", 60_000)),
		}}, 400_000, true, false},
		// What cutting text cannot shrink.
		{"huge details", tools.Result{Content: []message.Block{message.Text("ok")}, Details: map[string]any{"x": strings.Repeat("d", maxBytes)}}, 400_000, false, true},
		{"huge image", tools.Result{Content: []message.Block{message.Image("image/png", strings.Repeat("A", maxBytes))}}, 400_000, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := encodeResult(tc.res, tc.maxChars, maxBytes)
			if tc.tooLarge {
				if err != errTooLarge {
					t.Fatalf("err = %v, want errTooLarge", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(data) > maxBytes {
				t.Fatalf("%d bytes, over %d", len(data), maxBytes)
			}
			got, err := decodeResult(data, 1<<30)
			if err != nil {
				t.Fatal(err)
			}
			if got.Content == nil {
				t.Fatal("content decoded as nil, want an empty list")
			}
			cut := false
			for _, b := range got.Content {
				if !utf8.ValidString(b.Text) {
					t.Fatal("a cut split a character")
				}
				cut = cut || strings.HasSuffix(b.Text, TruncationNotice)
			}
			if cut != tc.cut {
				t.Fatalf("cut = %v, want %v", cut, tc.cut)
			}
		})
	}
}

func TestDecodeResult(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body    string
		wantErr bool
	}{
		{`{"content":[{"type":"text","text":"a"}],"details":{"n":1},"isError":true}`, false},
		{`{"content":[]}`, false},
		{`{}`, false},
		{`{"content":[{"type":"image","data":"AA==","mimeType":"image/png"}]}`, false},
		{`{"content":[{"type":"toolCall","id":"c","name":"x"}]}`, true}, // not a result block
		{`{"content":[{"type":"text","text":5}]}`, true},
		{`{"content":"text"}`, true},
		{`[]`, true},
		{``, true},
	} {
		_, err := decodeResult([]byte(tc.body), 100)
		if (err != nil) != tc.wantErr {
			t.Errorf("decodeResult(%s) error = %v, want error %v", tc.body, err, tc.wantErr)
		}
	}
}

func TestHeaderLine(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"boom":               "boom",
		"":                   "tool failed",
		" \n\t":              "tool failed",
		"line 1\r\nline 2\n": "line 1 line 2", // a header value is one line
	} {
		if got := headerLine(in); got != want {
			t.Errorf("headerLine(%q) = %q, want %q", in, got, want)
		}
	}
	long := headerLine(strings.Repeat("é", maxErrorHeader))
	if len(long) > maxErrorHeader || !utf8.ValidString(long) || !strings.HasSuffix(long, "…") {
		t.Errorf("long header line: %d bytes, valid UTF-8 %v", len(long), utf8.ValidString(long))
	}
}

func TestCompareVersions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"1.10.0", "1.9.0", 1}, // numeric, not string, order
		{"1.0.0", "1.0.0", 0},
		{"1.0.0", "1.0.0+build.7", 0},
		{"1.0.0", "1.0.0-rc.1", 1}, // a release above its pre-releases
		{"0.9.9", "1.0.0-rc.1", -1},
		{"2.0.0", "garbage", 1}, // unparsable sorts lowest
		{"", "0.0.1", -1},
		{"x", "y", 0},
	} {
		if got := compareVersions(tc.a, tc.b); got != tc.want {
			t.Errorf("compareVersions(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := compareVersions(tc.b, tc.a); got != -tc.want {
			t.Errorf("compareVersions(%q, %q) = %d, want %d", tc.b, tc.a, got, -tc.want)
		}
	}
}

func TestImageChecks(t *testing.T) {
	t.Parallel()
	for data, want := range map[string]int{"": 0, "QQ==": 1, "QUI=": 2, "QUJD": 3, "QUJDRA": 4, "QUJDRA==": 4} {
		if got := decodedSize(data); got != want {
			t.Errorf("decodedSize(%q) = %d, want %d", data, got, want)
		}
	}
	for mime, want := range map[string]bool{
		"image/png": true, "image/svg+xml": true,
		"": false, "image/": false, "text/html": false, "image/png; x=1": false, "image/a/b": false,
		"image/" + strings.Repeat("p", 64): false,
	} {
		if got := validImageType(mime); got != want {
			t.Errorf("validImageType(%q) = %v, want %v", mime, got, want)
		}
	}
}
