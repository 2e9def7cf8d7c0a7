package agentprompt

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"unicode/utf8"
)

// frontmatterCases are the parser's table, and the fuzz test's seeds.
var frontmatterCases = []struct {
	name    string
	src     string
	want    map[string]string
	wantErr string // substring of the error; "" means no error
}{
	{
		name: "plain key value lines",
		src:  "---\nname: pdf\ndescription: Extract text from PDFs.\n---\n# body\n",
		want: map[string]string{"name": "pdf", "description": "Extract text from PDFs."},
	},
	{
		// Windows editors and a byte order mark.
		name: "CRLF and BOM",
		src:  "\uFEFF---\r\nname: pdf\r\ndescription: x\r\n---\r\nbody",
		want: map[string]string{"name": "pdf", "description": "x"},
	},
	{
		name: "closing line may carry trailing spaces, body may be empty",
		src:  "---\nname: a\n---  ",
		want: map[string]string{"name": "a"},
	},
	{
		name: "empty frontmatter",
		src:  "---\n---\n",
		want: map[string]string{},
	},
	{
		// A colon not followed by a space belongs to the value.
		name: "colons inside values",
		src:  "---\nhomepage: https://example.com/a:b\ndescription: Use when: the task says so\n---\n",
		want: map[string]string{"homepage": "https://example.com/a:b", "description": "Use when: the task says so"},
	},
	{
		name: "comments: whole lines and after a space; a # inside a word stays",
		src:  "---\n# a comment\nname: c-sharp # the name\ndescription: C# helpers\n  # indented comment\n---\n",
		want: map[string]string{"name": "c-sharp", "description": "C# helpers"},
	},
	{
		name: "double-quoted with escapes",
		src:  "---\ndescription: \"Say \\\"hi\\\"\\tthen \\u00e9\\x41\\\\ \\/ # not a comment\" # comment\n---\n",
		want: map[string]string{"description": "Say \"hi\"\tthen éA\\ / # not a comment"},
	},
	{
		name: "single-quoted with a doubled quote",
		src:  "---\ndescription: 'It''s # fine'\n---\n",
		want: map[string]string{"description": "It's # fine"},
	},
	{
		// Line breaks in quoted values fold to spaces; an empty line is a
		// line break; an escaped line break joins.
		name: "multi-line double-quoted",
		src:  "---\ndescription: \"first\n  second   \n\n  third\\\n  joined\"\nname: x\n---\n",
		want: map[string]string{"description": "first second\nthirdjoined", "name": "x"},
	},
	{
		name: "multi-line single-quoted",
		src:  "---\ndescription: 'one\n  two'\n---\n",
		want: map[string]string{"description": "one two"},
	},
	{
		name: "plain value continued on indented lines",
		src:  "---\ndescription: Extract text\n  and tables\n\n  from PDFs.\nname: pdf\n---\n",
		want: map[string]string{"description": "Extract text and tables\nfrom PDFs.", "name": "pdf"},
	},
	{
		name: "folded block scalar, clip",
		src:  "---\ndescription: >\n  Extract text\n  and tables.\n\n  Second paragraph.\nname: pdf\n---\n",
		want: map[string]string{"description": "Extract text and tables.\nSecond paragraph.\n", "name": "pdf"},
	},
	{
		name: "folded block scalar keeps more-indented lines",
		src:  "---\ndescription: >-\n  a\n  b\n    code\n  c\n---\n",
		want: map[string]string{"description": "a b\n  code\nc"},
	},
	{
		name: "literal block scalar, strip",
		src:  "---\ndescription: |-\n  line one\n    indented\n  line three\n---\n",
		want: map[string]string{"description": "line one\n  indented\nline three"},
	},
	{
		name: "literal block scalar, keep, with trailing empty lines",
		src:  "---\ndescription: |+\n  text\n\n\nname: n\n---\n",
		want: map[string]string{"description": "text\n\n\n", "name": "n"},
	},
	{
		name: "block scalar with an indentation indicator",
		src:  "---\ndescription: |2\n    two extra\n  base\n---\n",
		want: map[string]string{"description": "  two extra\nbase\n"},
	},
	{
		name: "empty block scalar",
		src:  "---\ndescription: |\nname: x\n---\n",
		want: map[string]string{"description": "", "name": "x"},
	},
	{
		// A nested mapping is kept as raw, dedented text.
		name: "nested metadata block",
		src:  "---\nname: x\nmetadata:\n  openclaw:\n    primaryEnv: KEY\n\n  other: 1\nallowed-tools:\n  - read\n  - exec\n---\n",
		want: map[string]string{
			"name":          "x",
			"metadata":      "openclaw:\n  primaryEnv: KEY\n\nother: 1",
			"allowed-tools": "- read\n- exec",
		},
	},
	{
		name: "flow metadata as JSON on one line",
		src:  "---\nmetadata: {\"openclaw\": {\"primaryEnv\": \"GEMINI_API_KEY\"}}\n---\n",
		want: map[string]string{"metadata": "{\"openclaw\": {\"primaryEnv\": \"GEMINI_API_KEY\"}}"},
	},
	{
		name: "flow value spread over lines",
		src:  "---\nmetadata: {\n    \"a\": 1\n  }\n---\n",
		want: map[string]string{"metadata": "{ \"a\": 1 }"},
	},
	{
		name: "null and empty values",
		src:  "---\na: ~\nb: null\nc:\nd: \"\"\n---\n",
		want: map[string]string{"a": "", "b": "", "c": "", "d": ""},
	},
	{
		name: "quoted key",
		src:  "---\n\"disable-model-invocation\": true\n---\n",
		want: map[string]string{"disable-model-invocation": "true"},
	},
	{
		// YAML forbids ": " in a plain value; such a value is read as if
		// folded, over several lines too.
		name: "colons in a value YAML rejects",
		src:  "---\ndescription: Use when: the user\n  asks: for it # note\nname: x\n---\n",
		want: map[string]string{"description": "Use when: the user asks: for it", "name": "x"},
	},
	{
		// Broken JSON metadata stays text, for the JSON reader to report.
		name: "flow value YAML rejects",
		src:  "---\nmetadata: {\"openclaw\": {\"primaryEnv\": }\nname: x\n---\n",
		want: map[string]string{"metadata": `{"openclaw": {"primaryEnv": }`, "name": "x"},
	},
	{
		// Pretty-printed JSON leaves its closing brace at column 0.
		name: "flow value closed at column 0",
		src:  "---\nmetadata: {\n  \"openclaw\": {\"primaryEnv\": \"K\"}\n}\n# a comment\nname: x\n---\n",
		want: map[string]string{"metadata": `{ "openclaw": {"primaryEnv": "K"} }`, "name": "x"},
	},
	{
		name: "flow value starting on the next line, with a comment",
		src:  "---\nmetadata:\n  # JSON\n  {\"a\": [1, 2]}\n---\n",
		want: map[string]string{"metadata": `{"a": [1, 2]}`},
	},
	{
		name: "tags, anchors and non-string scalars read as text",
		src:  "---\nname: !!str 123\nversion: 1.0\nflag: &f yes\n---\n",
		want: map[string]string{"name": "123", "version": "1.0", "flag": "yes"},
	},
	{
		name:    "an alias to another key's anchor",
		src:     "---\na: &x 1\nb: *x\n---\n",
		wantErr: "line 3: b: ",
	},
	{
		name:    "a quoted value that is not a colon-tolerant plain value",
		src:     "---\ndescription: \"Use when: x\" y\n---\n",
		wantErr: "line 2: description: ",
	},
	{
		name:    "a key that is a collection",
		src:     "---\n[a, b]: c\n---\n",
		wantErr: "line 2: a key must be text",
	},
	{
		name:    "a document without frontmatter",
		src:     "# Just markdown\n\nname: not a field\n",
		wantErr: "no frontmatter",
	},
	{
		name:    "unclosed frontmatter",
		src:     "---\nname: x\ndescription: y\n",
		wantErr: "not closed",
	},
	{
		name:    "duplicate key",
		src:     "---\nname: a\nname: b\n---\n",
		wantErr: `line 3: duplicate key "name"`,
	},
	{
		name:    "a line that is not key: value",
		src:     "---\nname: a\njust text\n---\n",
		wantErr: "line 3: expected",
	},
	{
		name:    "a top-level list",
		src:     "---\n- a\n---\n",
		wantErr: "not a list",
	},
	{
		name:    "indented first line",
		src:     "---\n  name: a\n---\n",
		wantErr: "line 2: unexpected indentation",
	},
	{
		name:    "unterminated double quote",
		src:     "---\ndescription: \"open\n---\n",
		wantErr: "line 2: description: found unexpected end of stream",
	},
	{
		name:    "unterminated single quote",
		src:     "---\ndescription: 'open\n---\n",
		wantErr: "line 2: description: found unexpected end of stream",
	},
	{
		name:    "text after a quoted value",
		src:     "---\ndescription: \"a\" b\n---\n",
		wantErr: "line 2: description: did not find expected key",
	},
	{
		name:    "unknown escape",
		src:     "---\ndescription: \"\\q\"\n---\n",
		wantErr: "line 2: description: found unknown escape character",
	},
	{
		name:    "short unicode escape",
		src:     "---\ndescription: \"\\u12\"\n---\n",
		wantErr: "line 2: description: did not find expected hexadecimal number",
	},
	{
		name:    "text after a block scalar indicator",
		src:     "---\ndescription: | nope\n  x\n---\n",
		wantErr: "line 2: description: did not find expected comment or line break",
	},
	{
		name:    "empty key",
		src:     "---\n: value\n---\n",
		wantErr: "empty key",
	},
}

func TestParseFrontmatter(t *testing.T) {
	t.Parallel()
	for _, tc := range frontmatterCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseFrontmatter(tc.src)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q (fields %q)", err, tc.wantErr, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("fields:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// FuzzParseFrontmatter checks that the parser never panics, and that what it
// accepts is well formed: keys are non-empty, and valid UTF-8 in gives valid
// UTF-8 out.
func FuzzParseFrontmatter(f *testing.F) {
	for _, tc := range frontmatterCases {
		f.Add(tc.src)
	}
	f.Fuzz(func(t *testing.T, src string) {
		fields, err := parseFrontmatter(src)
		if err != nil {
			if fields != nil {
				t.Fatalf("fields %q returned with error %v", fields, err)
			}
			return
		}
		for k, v := range fields {
			if k == "" {
				t.Fatalf("empty key with value %q", v)
			}
			if utf8.ValidString(src) && (!utf8.ValidString(k) || !utf8.ValidString(v)) {
				t.Fatalf("invalid UTF-8 out of valid input: %q: %q", k, v)
			}
		}
	})
}

// FuzzFrontmatterQuotedRoundTrip checks the quoted-scalar reading against
// an encoder: any UTF-8 string written as a double-quoted value (escapes for
// quotes, backslashes, line breaks and whatever YAML does not allow as is)
// reads back unchanged, and so does any single-line string of characters
// YAML allows, written as a single-quoted value.
func FuzzFrontmatterQuotedRoundTrip(f *testing.F) {
	for _, s := range []string{"", "plain", `say "hi"`, `back\slash`, "tab\there", "multi\nline\n", "it's", "  spaces  ", "🦞 é", "\x00\x1f\x7f", "# not a comment", "nel\u0085 ls\u2028 bom\ufeff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if !utf8.ValidString(v) {
			return // YAML is text; a real parser rejects invalid UTF-8
		}
		var dq strings.Builder
		plain := true // every character may stand as is
		for _, r := range v {
			switch {
			case r == '"' || r == '\\':
				dq.WriteByte('\\')
				dq.WriteRune(r)
			case r == '\n':
				dq.WriteString(`\n`)
				plain = false
			case !yamlPrintable(r):
				fmt.Fprintf(&dq, `\U%08x`, r)
				plain = false
			default:
				dq.WriteRune(r)
			}
		}
		fields, err := parseFrontmatter("---\nk: \"" + dq.String() + "\" # comment\n---\n")
		if err != nil || fields["k"] != v {
			t.Fatalf("double-quoted %q: got %q, %v", dq.String(), fields["k"], err)
		}
		if !plain {
			return
		}
		sq := "'" + strings.ReplaceAll(v, "'", "''") + "'"
		fields, err = parseFrontmatter("---\nk: " + sq + "\n---\n")
		if err != nil || fields["k"] != v {
			t.Fatalf("single-quoted %s: got %q, %v", sq, fields["k"], err)
		}
	})
}

// yamlPrintable reports whether r may appear as is inside a quoted scalar:
// YAML's printable characters, less the ones the parser takes for line
// breaks (NEL, LS, PS) or a byte order mark, and less tab (it folds with
// the spaces around a line break).
func yamlPrintable(r rune) bool {
	switch {
	case r == 0x85 || r == 0x2028 || r == 0x2029 || r == 0xFEFF:
		return false
	case r >= 0x20 && r <= 0x7E, r >= 0xA0 && r <= 0xD7FF, r >= 0xE000 && r <= 0xFFFD, r >= 0x10000 && r <= 0x10FFFF:
		return true
	}
	return false
}
