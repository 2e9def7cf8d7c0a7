package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/gateway"
	"github.com/lanefleet/lanefleet/internal/embedded"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

var (
	gatewayBuild sync.Once
	gatewayBin   string
	gatewayErr   error
)

// gatewayBinary builds cmd/gateway once per test binary.
func gatewayBinary(t *testing.T) string {
	t.Helper()
	gatewayBuild.Do(func() {
		dir := filepath.Dir(workerBinary(t)) // removed with it by TestMain
		gatewayBin = filepath.Join(dir, "gateway")
		out, err := exec.Command("go", "build", "-o", gatewayBin, "../cmd/gateway").CombinedOutput()
		if err != nil {
			gatewayErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if gatewayErr != nil {
		t.Fatal(gatewayErr)
	}
	return gatewayBin
}

// gatewayProc is a cmd/gateway process.
type gatewayProc struct {
	cmd  *exec.Cmd
	url  string
	logs *syncBuffer
	done chan struct{}
}

// startGateway starts cmd/gateway on a free loopback port, joined to the
// NATS server at natsURL, and waits until it answers /readyz.
func startGateway(t *testing.T, natsURL string, args ...string) *gatewayProc {
	t.Helper()
	ports, err := embedded.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	g := &gatewayProc{url: "http://" + addr, logs: &syncBuffer{}, done: make(chan struct{})}
	g.cmd = exec.Command(gatewayBinary(t), append([]string{"--http", addr, "--nats-url", natsURL, "--log-level", "warn"}, args...)...)
	g.cmd.Stdout, g.cmd.Stderr = g.logs, g.logs
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.cmd.Wait(); close(g.done) }()
	t.Cleanup(func() {
		g.kill()
		if t.Failed() {
			t.Logf("gateway %s output:\n%s", addr, g.logs.b.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(g.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return g
			}
		}
		select {
		case <-g.done:
			t.Fatalf("gateway exited: %s", g.logs.b.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway not ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (g *gatewayProc) kill() {
	_ = g.cmd.Process.Signal(syscall.SIGKILL)
	<-g.done
}

// sse is one server-sent event as curl prints it.
type sse struct{ id, event, data string }

// curlEvents runs `curl -N` on url (with Last-Event-ID when lastID is
// set) and sends its events on the channel, closed when curl ends.
func curlEvents(t *testing.T, url, lastID string) (<-chan sse, *exec.Cmd) {
	t.Helper()
	args := []string{"-sS", "-N", url}
	if lastID != "" {
		args = append(args, "-H", "Last-Event-ID: "+lastID)
	}
	cmd := exec.Command("curl", args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("curl: %v", err)
	}
	ch := make(chan sse, 256)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		var cur sse
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if cur.event != "" {
					ch <- cur
				}
				cur = sse{}
			case strings.HasPrefix(line, "id: "):
				cur.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				cur.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				cur.data = line[6:]
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return ch, cmd
}

// postJSON posts body to url and decodes the JSON answer into v.
func postJSON(t *testing.T, url, body string, hdr map[string]string, v any) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, val := range hdr {
		req.Header.Set(k, val)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, b)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("POST %s: %v: %s", url, err, b)
		}
	}
}

// TestGatewayResumeAcrossKills follows a run with `curl -N` through one
// gateway process while the worker running it is SIGKILLed (another takes
// the run over and runs it again), then SIGKILLs that gateway too and
// resumes with Last-Event-ID through a new gateway process: the events
// the two curls got are the run's, each once, in order, and the reply is
// whole.
func TestGatewayResumeAcrossKills(t *testing.T) {
	t.Parallel()
	ns := natstest.Start(t)
	w1 := startWorkerProc(t, ns.URL, "gw-w1")
	g1 := startGateway(t, ns.URL)
	words := "one two three four five six seven eight"
	script := fmt.Sprintf(`#script {"replies":[{"text":%q,"chunks":8,"delayMs":250}]}`, words)
	body, _ := json.Marshal(map[string]string{"text": script, "model": "scripted/script"})
	var sent gateway.SendReply
	postJSON(t, g1.url+"/api/sessions/resume:1/messages", string(body), map[string]string{"Idempotency-Key": "resume-1"}, &sent)

	first, _ := curlEvents(t, g1.url+sent.Events, "")
	var got []sse
	killedWorker := false
	for ev := range first {
		got = append(got, ev)
		if !killedWorker && ev.event == "assistant" {
			// Mid-reply: the worker dies; another takes the run over.
			w1.kill()
			startWorkerProc(t, ns.URL, "gw-w2")
			killedWorker = true
		}
		if isRestart(ev) {
			break // the new attempt started: now the gateway dies
		}
	}
	if !killedWorker || !isRestart(got[len(got)-1]) {
		t.Fatalf("the first curl ended before the run was taken over: %v", ids(got))
	}
	g1.kill()
	g2 := startGateway(t, ns.URL)
	second, _ := curlEvents(t, g2.url+sent.Events, got[len(got)-1].id)
	for ev := range second {
		got = append(got, ev)
	}
	seqs := ids(got)
	t.Logf("events through the first gateway and the second: %v", seqs)
	for i, s := range seqs {
		if s != i+1 {
			t.Fatalf("event ids %v: not 1…n, each once", seqs)
		}
	}
	last := got[len(got)-1]
	if last.event != "final" {
		t.Fatalf("the resumed stream ended on %q", last.event)
	}
	var fin struct {
		Data struct {
			Result struct {
				Payloads []struct{ Text string }
			}
		}
	}
	if err := json.Unmarshal([]byte(last.data), &fin); err != nil || len(fin.Data.Result.Payloads) == 0 || fin.Data.Result.Payloads[0].Text != words {
		t.Fatalf("final reply %s (%v)", last.data, err)
	}
	// The reply streamed by the attempt that finished is whole too.
	text := ""
	for _, ev := range got {
		if ev.event != "assistant" {
			continue
		}
		var a struct{ Data struct{ Text string } }
		_ = json.Unmarshal([]byte(ev.data), &a)
		text = a.Data.Text
	}
	if text != words {
		t.Fatalf("last assistant text %q", text)
	}
}

func isRestart(ev sse) bool {
	return ev.event == "lifecycle" && strings.Contains(ev.data, `"phase":"restart"`)
}

func ids(evs []sse) []int {
	var out []int
	for _, e := range evs {
		n, _ := strconv.Atoi(e.id)
		out = append(out, n)
	}
	return out
}

// TestGatewaysAlternate sends one conversation through two gateway
// processes in turn, as a client's round-robin would, each message
// answered through the gateway it went to: the session's transcript is
// the conversation, in order, one session.
func TestGatewaysAlternate(t *testing.T) {
	t.Parallel()
	ns := natstest.Start(t)
	startWorkerProc(t, ns.URL, "alt-w1", "--model", "scripted/echo")
	tok, hash := gateway.NewToken()
	file := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(file, []byte(`{"tokens":[{"name":"app","hash":"`+hash+`","role":"sender","prefixes":["app:"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	gws := []*gatewayProc{startGateway(t, ns.URL, "--tokens", file), startGateway(t, ns.URL, "--tokens", file)}
	auth := map[string]string{"Authorization": "Bearer " + tok}
	var want []string
	for i := range 6 {
		g := gws[i%2]
		msg := fmt.Sprintf("message %d via gateway %d", i, i%2+1)
		req, _ := http.NewRequestWithContext(context.Background(), "POST", g.url+"/api/sessions/app:alt/messages",
			strings.NewReader(fmt.Sprintf(`{"text":%q,"stream":true}`, msg)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", auth["Authorization"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"text":"echo: `+msg+`"`) {
			t.Fatalf("message %d: %d %s", i, resp.StatusCode, b)
		}
		want = append(want, msg, "echo: "+msg)
	}
	req, _ := http.NewRequest("GET", gws[0].url+"/api/sessions/app:alt/history", nil)
	req.Header.Set("Authorization", auth["Authorization"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct {
		Entries []struct {
			Type    string
			Message *struct {
				Role    string
				Content json.RawMessage
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range h.Entries {
		if e.Message == nil {
			continue
		}
		got = append(got, contentText(e.Message.Content))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("transcript:\n%q\nwant:\n%q", got, want)
	}
}

// contentText is a message content's text: a string or text blocks.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct{ Type, Text string }
	_ = json.Unmarshal(raw, &blocks)
	var sb strings.Builder
	for _, b := range blocks {
		sb.WriteString(b.Text)
	}
	return sb.String()
}
