package sessionfile

import (
	"bytes"
	"fmt"
	"testing"
)

// benchFile returns a session file of n message entries shaped like real
// coding sessions: user prompts, assistant messages with thinking, text,
// tool calls and usage, and tool results with a few hundred bytes of output.
func benchFile(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"type":"session","version":3,"id":"0c9d5f2e-1111-4222-8333-944445555666","timestamp":"2026-03-15T10:20:30.123Z","cwd":"/home/u/proj"}` + "\n")
	parent := "null"
	output := bytes.Repeat([]byte(`func handler(w http.ResponseWriter, r *http.Request) {\n\tfmt.Fprintf(w, \"hello %s\", r.URL.Path)\n}\n`), 6)
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("%08x", i+1)
		var msg string
		switch i % 4 {
		case 0:
			msg = fmt.Sprintf(`{"role":"user","content":[{"type":"text","text":"Please look at handler %d and explain what it does, then fix the bug in the routing."}],"timestamp":1773570030200}`, i)
		case 1:
			msg = fmt.Sprintf(`{"role":"assistant","content":[{"type":"thinking","thinking":"The user wants me to read the handler first; I will open the file and look at the routing table.","thinkingSignature":"EqQBCkYIBxgCKkDr0n3Ha0c2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXJl"},{"type":"text","text":"Let me read the file."},{"type":"toolCall","id":"toolu_01%08d","name":"read","arguments":{"path":"internal/server/handler%d.go","offset":1,"limit":200}}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-6","usage":{"input":12,"output":40,"cacheRead":3000,"cacheWrite":0,"totalTokens":3052,"cost":{"input":0.000036,"output":0.0006,"cacheRead":0.0009,"cacheWrite":0,"total":0.001536}},"stopReason":"toolUse","timestamp":1773570031000}`, i, i)
		case 2:
			msg = fmt.Sprintf(`{"role":"toolResult","toolCallId":"toolu_01%08d","toolName":"read","content":[{"type":"text","text":"%s"}],"details":{"truncated":false,"lines":18},"isError":false,"timestamp":1773570031500}`, i-1, output)
		case 3:
			msg = `{"role":"assistant","content":[{"type":"text","text":"The handler writes a greeting with the request path. The bug is that the mux registers the pattern without a trailing slash, so sub-paths never reach it; I changed it to \"/hello/\"."}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-6","usage":{"input":400,"output":80,"cacheRead":3000,"cacheWrite":0,"totalTokens":3480,"cost":{"input":0.0012,"output":0.0012,"cacheRead":0.0009,"cacheWrite":0,"total":0.0033}},"stopReason":"stop","timestamp":1773570032000}`
		}
		fmt.Fprintf(&b, `{"type":"message","id":"%s","parentId":%s,"timestamp":"2026-03-15T10:20:31.000Z","message":%s}`+"\n", id, parent, msg)
		parent = `"` + id + `"`
	}
	return b.Bytes()
}

func BenchmarkRead(b *testing.B) {
	data := benchFile(4000)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		f, err := Read(bytes.NewReader(data))
		if err != nil || len(f.Entries) != 4000 {
			b.Fatal(err)
		}
	}
}

// BenchmarkWrite writes a 4000-entry file read from disk (each line given
// back after the check that it still decodes to its entry) and the same
// entries without their lines (encoded in pi's order, as later turns are).
func BenchmarkWrite(b *testing.B) {
	f, err := Read(bytes.NewReader(benchFile(4000)))
	if err != nil {
		b.Fatal(err)
	}
	fresh := &File{Header: f.Header}
	for _, e := range f.Entries {
		e.Raw = nil
		fresh.Entries = append(fresh.Entries, e)
	}
	for _, c := range []struct {
		name string
		f    *File
	}{{"read-lines", f}, {"pi-order", fresh}} {
		b.Run(c.name, func(b *testing.B) {
			var buf bytes.Buffer
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				if err := Write(&buf, c.f); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(buf.Len()))
			}
		})
	}
}

func BenchmarkRepairContent(b *testing.B) {
	data := benchFile(4000)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := RepairContent(data); err != nil {
			b.Fatal(err)
		}
	}
}
