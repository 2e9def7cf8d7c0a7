package remote_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/internal/embedded"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/remote"
)

// funcTool is a tool whose Call is a function.
type funcTool struct {
	spec provider.Tool
	fn   func(ctx context.Context, c tools.Call) (tools.Result, error)
}

func (f funcTool) Spec() provider.Tool { return f.spec }
func (f funcTool) Call(ctx context.Context, c tools.Call) (tools.Result, error) {
	return f.fn(ctx, c)
}

func newTool(name string, fn func(ctx context.Context, c tools.Call) (tools.Result, error)) funcTool {
	return funcTool{
		spec: provider.Tool{Name: name, Description: "the " + name + " tool",
			Parameters: map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}}},
		fn: fn,
	}
}

// bundle is one server with a connection for services and one for callers.
type bundle struct {
	url    string
	server *nats.Conn // connection of the serving process
	client *nats.Conn // connection of the calling worker
	log    zerolog.Logger
}

func setup(t *testing.T) *bundle {
	t.Helper()
	srv := natstest.Start(t)
	return &bundle{
		url:    srv.URL,
		server: natstest.Connect(t, srv.URL),
		client: natstest.Connect(t, srv.URL),
		log:    zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
	}
}

// serve serves ts on nc until the test ends.
func (b *bundle) serve(t *testing.T, nc *nats.Conn, cfg remote.ServiceConfig, ts ...tools.Tool) *remote.Service {
	t.Helper()
	cfg.Logger = b.log
	svc, err := remote.Serve(nc, cfg, ts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := svc.Stop(); err != nil {
			t.Error(err)
		}
	})
	return svc
}

// discoverUntil discovers from the client connection until done accepts
// the list, for up to a minute. Each try's window is twice the last one's
// (from cfg.Window, 100 ms when 0, up to 5 s): on a loaded machine an
// instance's reply can miss a short window, as it can in production, where
// the next refresh finds it; under the race detector on a busy CI machine
// replies missed thirty windows of 100 ms in a row.
func (b *bundle) discoverUntil(t *testing.T, cfg remote.DiscoverConfig, done func(tools.List) bool) tools.List {
	t.Helper()
	if cfg.Window == 0 {
		cfg.Window = 100 * time.Millisecond
	}
	cfg.Logger = b.log
	var list tools.List
	for deadline := time.Now().Add(waitLimit); time.Now().Before(deadline); cfg.Window = min(2*cfg.Window, 5*time.Second) {
		var err error
		if list, err = remote.Discover(t.Context(), b.client, cfg); err != nil {
			t.Fatal(err)
		}
		if done(list) {
			return list
		}
	}
	t.Fatalf("discovery never found what the test waits for; last: %v", list.Specs())
	return nil
}

// discover discovers until it finds n tools.
func (b *bundle) discover(t *testing.T, cfg remote.DiscoverConfig, n int) tools.List {
	t.Helper()
	return b.discoverUntil(t, cfg, func(l tools.List) bool { return len(l) >= n })
}

// lookup discovers the tool called name.
func (b *bundle) lookup(t *testing.T, name string, cfg remote.DiscoverConfig) tools.Tool {
	t.Helper()
	list := b.discoverUntil(t, cfg, func(l tools.List) bool { _, ok := l.Lookup(name); return ok })
	tool, _ := list.Lookup(name)
	return tool
}

// remoteErr asserts err is a *remote.Error wrapping want.
func remoteErr(t *testing.T, err, want error) *remote.Error {
	t.Helper()
	var e *remote.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *remote.Error", err, err)
	}
	if !errors.Is(err, want) {
		t.Fatalf("error %q (code %q) does not wrap %v", err, e.Code, want)
	}
	return e
}

func text(res tools.Result) string {
	var sb strings.Builder
	for _, b := range res.Content {
		sb.WriteString(b.Text)
	}
	return sb.String()
}

func echo(ctx context.Context, c tools.Call) (tools.Result, error) {
	ri := remote.RunInfoFrom(ctx)
	q, _ := c.Args["q"].(string)
	return tools.Result{
		Content: []message.Block{message.Text("echo " + q), message.Image("image/png", "iVBORw0KGgo=")},
		Details: map[string]any{"id": c.ID, "name": c.Name, "session": ri.SessionKey, "run": ri.RunID},
	}, nil
}

func TestDiscoverAndCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.serve(t, b.server, remote.ServiceConfig{Version: "1.0.0"}, newTool("echo", echo), newTool("other", echo))

	list := b.discover(t, remote.DiscoverConfig{}, 2)
	specs := list.Specs()
	if len(specs) != 2 || specs[0].Name != "echo" || specs[1].Name != "other" {
		t.Fatalf("specs = %+v, want echo and other", specs)
	}
	if specs[0].Description != "the echo tool" {
		t.Errorf("description = %q", specs[0].Description)
	}
	if props, _ := specs[0].Parameters["properties"].(map[string]any); props["q"] == nil {
		t.Errorf("parameters = %v, want the served schema", specs[0].Parameters)
	}

	tool, _ := list.Lookup("echo")
	ctx := remote.WithRunInfo(t.Context(), remote.RunInfo{SessionKey: "agent:main:dm:42", RunID: "run-1"})
	res, err := tool.Call(ctx, tools.Call{ID: "call_1", Name: "echo", Args: map[string]any{"q": "hi <&>"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || len(res.Content) != 2 || res.Content[0].Text != "echo hi <&>" ||
		res.Content[1].Type != message.BlockImage || res.Content[1].Data != "iVBORw0KGgo=" {
		t.Fatalf("result = %+v", res)
	}
	want := map[string]any{"id": "call_1", "name": "echo", "session": "agent:main:dm:42", "run": "run-1"}
	if fmt.Sprint(res.Details) != fmt.Sprint(want) {
		t.Errorf("details = %v, want %v", res.Details, want)
	}
}

func TestIsErrorResultIsAResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.serve(t, b.server, remote.ServiceConfig{}, newTool("grep", func(context.Context, tools.Call) (tools.Result, error) {
		return tools.ErrorResult("no match"), nil
	}))
	res, err := b.lookup(t, "grep", remote.DiscoverConfig{}).Call(t.Context(), tools.Call{ID: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || text(res) != "no match" {
		t.Fatalf("result = %+v, want an isError result", res)
	}
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A window of a second: a refresh with a service waits it out, and
	// a busy machine's reply can miss a shorter one.
	reg, err := remote.NewRegistry(b.client, remote.DiscoverConfig{Window: time.Second, Logger: b.log})
	if err != nil {
		t.Fatal(err)
	}
	var set tools.Set = reg
	if len(set.Specs()) != 0 {
		t.Fatal("a new registry has tools")
	}
	svc := b.serve(t, b.server, remote.ServiceConfig{}, newTool("echo", echo))
	for deadline := time.Now().Add(waitLimit); ; {
		if err := reg.Refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, ok := set.Lookup("echo"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("echo not found after Refresh")
		}
	}
	if err := svc.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := reg.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(set.Specs()) != 0 {
		t.Fatalf("specs = %v after the service stopped", set.Specs())
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := reg.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run on a cancelled context = %v", err)
	}
}

func TestTwoInstancesShareLoad(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var served [2]atomic.Int32
	for i := range 2 {
		nc := natstest.Connect(t, b.url)
		tool := newTool("who", func(context.Context, tools.Call) (tools.Result, error) {
			served[i].Add(1)
			return tools.TextResult(fmt.Sprint(i)), nil
		})
		tool.spec.Description = fmt.Sprintf("instance %d", i)
		// The newer instance's spec wins.
		b.serve(t, nc, remote.ServiceConfig{Version: fmt.Sprintf("1.%d.0", 9+i)}, tool)
	}

	// The spec of version 1.10.0 wins once both instances answered.
	list := b.discoverUntil(t, remote.DiscoverConfig{}, func(l tools.List) bool {
		return len(l) > 0 && l[0].Spec().Description == "instance 1"
	})
	if len(list) != 1 {
		t.Fatalf("discovered %d tools, want who once", len(list))
	}
	const calls = 60
	for range calls {
		if _, err := list[0].Call(t.Context(), tools.Call{ID: "c"}); err != nil {
			t.Fatal(err)
		}
	}
	a, c := served[0].Load(), served[1].Load()
	if a+c != calls || a == 0 || c == 0 {
		t.Fatalf("instances served %d and %d calls, want both a share of %d", a, c, calls)
	}
}

func TestToolErrorReachesCaller(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.serve(t, b.server, remote.ServiceConfig{}, newTool("read", func(context.Context, tools.Call) (tools.Result, error) {
		return tools.Result{}, errors.New("open notes.txt: no such file\nlisting: a.txt b.txt")
	}))
	_, err := b.lookup(t, "read", remote.DiscoverConfig{}).Call(t.Context(), tools.Call{ID: "c"})
	e := remoteErr(t, err, remote.ErrToolFailed)
	if e.Error() != "open notes.txt: no such file\nlisting: a.txt b.txt" || e.Code != remote.CodeToolFailed || e.Tool != "read" {
		t.Fatalf("error = %q code %q tool %q", e.Error(), e.Code, e.Tool)
	}
}

func TestPanicKeepsServiceRunning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc := b.serve(t, b.server, remote.ServiceConfig{},
		newTool("crash", func(context.Context, tools.Call) (tools.Result, error) {
			var m map[string]int
			//lint:ignore SA5000 the tool panics on purpose
			m["x"] = 1 // nil map write
			return tools.Result{}, nil
		}),
		newTool("echo", echo))
	list := b.discover(t, remote.DiscoverConfig{}, 2)
	crash, _ := list.Lookup("crash")
	for range 2 {
		_, err := crash.Call(t.Context(), tools.Call{ID: "c"})
		e := remoteErr(t, err, remote.ErrToolFailed)
		if !strings.Contains(e.Error(), "tool crash failed: it panicked: assignment to entry in nil map") {
			t.Fatalf("error = %q", e.Error())
		}
	}
	echoTool, _ := list.Lookup("echo")
	if res, err := echoTool.Call(t.Context(), tools.Call{Args: map[string]any{"q": "still here"}}); err != nil || text(res) != "echo still here" {
		t.Fatalf("after panics: %+v, %v", res, err)
	}
	// $SRV.STATS tells operators. A call counts as in flight until its
	// handler returns, a moment after its reply went out.
	deadline := time.Now().Add(30 * time.Second)
	for settled := false; !settled && time.Now().Before(deadline); {
		settled = true
		for _, ep := range svc.Stats().Endpoints {
			var st remote.ToolStats
			if json.Unmarshal(ep.Data, &st) == nil && st.InFlight != 0 {
				settled = false
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	for _, ep := range svc.Stats().Endpoints {
		var st remote.ToolStats
		if err := json.Unmarshal(ep.Data, &st); err != nil {
			t.Fatal(err)
		}
		want := remote.ToolStats{NumErrors: 2, NumPanics: 2}
		if ep.Name == "echo" {
			want = remote.ToolStats{}
		}
		st.ProcessingTime = 0
		if st != want {
			t.Errorf("%s stats = %+v, want %+v", ep.Name, st, want)
		}
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	// The subtests run in order and share the tool; each call sends one
	// value on started and, once its context ends, one on causes.
	b := setup(t)
	causes := make(chan error, 3)
	started := make(chan struct{}, 4)
	b.serve(t, b.server, remote.ServiceConfig{}, newTool("slow", func(ctx context.Context, _ tools.Call) (tools.Result, error) {
		started <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return tools.Result{}, ctx.Err()
	}))

	t.Run("call timeout", func(t *testing.T) {
		tool := b.lookup(t, "slow", remote.DiscoverConfig{CallTimeout: 200 * time.Millisecond})
		_, err := tool.Call(t.Context(), tools.Call{ID: "c"})
		e := remoteErr(t, err, remote.ErrTimeout)
		if e.Error() != "tool slow timed out after 200ms" {
			t.Fatalf("error = %q", e.Error())
		}
		// The service ends the tool's context when the caller gives up.
		if cause := <-causes; cause == nil || !strings.Contains(cause.Error(), "caller stopped waiting") {
			t.Fatalf("tool context cause = %v", cause)
		}
	})
	t.Run("timeout cancel before the service's timer", func(t *testing.T) {
		// A slow machine can deliver the caller's cancel before the
		// service's own timer fires: the call still ends as a timeout.
		for len(started) > 0 {
			<-started // the earlier subtest's call
		}
		msg := &nats.Msg{Subject: remote.Subject("slow"), Header: nats.Header{}, Data: []byte(`{"id":"c","name":"slow"}`)}
		msg.Header.Set(remote.HeaderCallToken, "tok-timeout")
		msg.Header.Set(remote.HeaderTimeout, "600000")
		replies := make(chan *nats.Msg, 1)
		go func() {
			rep, err := b.client.RequestMsgWithContext(t.Context(), msg)
			if err != nil {
				t.Error(err)
			}
			replies <- rep
		}()
		<-started
		cancel := &nats.Msg{Subject: remote.CancelSubject("slow"), Header: nats.Header{}}
		cancel.Header.Set(remote.HeaderCallToken, "tok-timeout")
		cancel.Header.Set(remote.HeaderCancelReason, "timeout")
		if err := b.client.PublishMsg(cancel); err != nil {
			t.Fatal(err)
		}
		if cause := <-causes; cause == nil || !strings.Contains(cause.Error(), "caller stopped waiting") {
			t.Fatalf("tool context cause = %v", cause)
		}
		if rep := <-replies; rep == nil || rep.Header.Get(micro.ErrorCodeHeader) != remote.CodeTimeout {
			t.Fatalf("reply = %+v, want code %s", rep, remote.CodeTimeout)
		}
	})
	t.Run("context deadline", func(t *testing.T) {
		tool := b.lookup(t, "slow", remote.DiscoverConfig{})
		ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
		defer cancel()
		_, err := tool.Call(ctx, tools.Call{ID: "c"})
		remoteErr(t, err, remote.ErrTimeout)
		<-causes
	})
	t.Run("context cancelled", func(t *testing.T) {
		tool := b.lookup(t, "slow", remote.DiscoverConfig{})
		ctx, cancel := context.WithCancelCause(t.Context())
		stop := errors.New("run aborted")
		go func() { <-started; cancel(stop) }()
		_, err := tool.Call(ctx, tools.Call{ID: "c"})
		e := remoteErr(t, err, stop)
		if e.Error() != "tool slow was cancelled: run aborted" {
			t.Fatalf("error = %q", e.Error())
		}
	})
}

func TestStoppedServiceIsUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc := b.serve(t, b.server, remote.ServiceConfig{}, newTool("echo", echo))
	tool := b.lookup(t, "echo", remote.DiscoverConfig{})
	if err := svc.Stop(); err != nil {
		t.Fatal(err)
	}
	if !svc.Stopped() {
		t.Fatal("Stopped() = false after Stop")
	}
	_, err := tool.Call(t.Context(), tools.Call{ID: "c"})
	e := remoteErr(t, err, remote.ErrUnavailable)
	if e.Error() != "tool echo is not available: no process serves it" {
		t.Fatalf("error = %q", e.Error())
	}
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("error %v does not wrap nats.ErrNoResponders", err)
	}
}

func TestStopCancelsCallsInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan struct{})
	cause := make(chan error, 1)
	svc := b.serve(t, b.server, remote.ServiceConfig{}, newTool("slow", func(ctx context.Context, _ tools.Call) (tools.Result, error) {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return tools.Result{}, ctx.Err()
	}))
	tool := b.lookup(t, "slow", remote.DiscoverConfig{})
	errc := make(chan error, 1)
	go func() {
		_, err := tool.Call(t.Context(), tools.Call{ID: "c", Key: "k-1"})
		errc <- err
	}()
	<-started
	if err := svc.Stop(); err != nil {
		t.Fatal(err)
	}
	// Stop returned, so the tool has returned.
	if c := <-cause; !errors.Is(c, remote.ErrStopped) {
		t.Fatalf("tool context cause = %v, want ErrStopped", c)
	}
	// The tool ran in part: the caller is told, and does not resend it.
	e := remoteErr(t, <-errc, remote.ErrToolFailed)
	if e.Error() != "tool slow was stopped before it finished: the process serving it is shutting down; it may have taken effect in part (idempotency key k-1)" {
		t.Fatalf("error = %q", e.Error())
	}
}

// TestCallerCancelStopsTheCall: a caller whose context ends before the
// reply (its run was stopped) cancels the call where it runs, in another
// process, instead of leaving it to run until its timeout.
func TestCallerCancelStopsTheCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan struct{})
	cause := make(chan error, 1)
	b.serve(t, b.server, remote.ServiceConfig{}, newTool("slow", func(ctx context.Context, _ tools.Call) (tools.Result, error) {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return tools.Result{}, ctx.Err()
	}))
	tool := b.lookup(t, "slow", remote.DiscoverConfig{})
	ctx, stop := context.WithCancelCause(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := tool.Call(ctx, tools.Call{ID: "c"})
		errc <- err
	}()
	<-started
	runStopped := errors.New("run stopped")
	stop(runStopped)
	e := remoteErr(t, <-errc, runStopped)
	if !strings.Contains(e.Error(), "tool slow was cancelled: run stopped") {
		t.Errorf("caller's error = %q", e.Error())
	}
	select {
	case c := <-cause:
		if c == nil || !strings.Contains(c.Error(), "the caller cancelled the call") {
			t.Errorf("tool context cause = %v, want the caller's cancel", c)
		}
	case <-time.After(time.Minute):
		t.Fatal("the served call was not cancelled")
	}
}

func TestShutdownLetsCallsFinish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started, release := make(chan struct{}), make(chan struct{})
	svc := b.serve(t, b.server, remote.ServiceConfig{}, newTool("job", func(ctx context.Context, _ tools.Call) (tools.Result, error) {
		close(started)
		<-release
		return tools.TextResult("done"), nil
	}))
	tool := b.lookup(t, "job", remote.DiscoverConfig{})
	type out struct {
		res tools.Result
		err error
	}
	outc := make(chan out, 1)
	go func() {
		res, err := tool.Call(t.Context(), tools.Call{ID: "c"})
		outc <- out{res, err}
	}()
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- svc.Shutdown(t.Context()) }()
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if o := <-outc; o.err != nil || text(o.res) != "done" {
		t.Fatalf("call during shutdown = %+v, %v", o.res, o.err)
	}
}

func TestMalformedRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.serve(t, b.server, remote.ServiceConfig{}, newTool("echo", echo))
	for _, tc := range []struct {
		name string
		body string
		hdr  nats.Header
	}{
		{"not JSON", "hello", nil},
		{"args not an object", `{"id":"c","args":"q=1"}`, nil},
		{"other tool's name", `{"id":"c","name":"rm","args":{}}`, nil},
		{"bad timeout header", `{"id":"c"}`, nats.Header{remote.HeaderTimeout: []string{"soon"}}},
		{"bad heartbeat header", `{"id":"c"}`, nats.Header{remote.HeaderHeartbeat: []string{"-5"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := &nats.Msg{Subject: remote.Subject("echo"), Data: []byte(tc.body), Header: tc.hdr}
			rep, err := b.client.RequestMsgWithContext(t.Context(), msg)
			if err != nil {
				t.Fatal(err)
			}
			if code := rep.Header.Get(micro.ErrorCodeHeader); code != remote.CodeBadRequest {
				t.Fatalf("code = %q (%q), want 400", code, rep.Header.Get(micro.ErrorHeader))
			}
			var body struct{ Error string }
			if err := json.Unmarshal(rep.Data, &body); err != nil || !strings.HasPrefix(body.Error, "tool echo got a ") {
				t.Fatalf("body = %s (%v)", rep.Data, err)
			}
		})
	}
	// The service still answers.
	if _, err := b.lookup(t, "echo", remote.DiscoverConfig{}).Call(t.Context(), tools.Call{}); err != nil {
		t.Fatal(err)
	}
}

func TestMalformedReply(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A hand-written micro service whose endpoint is a tool by its
	// metadata but answers garbage.
	svc, err := micro.AddService(b.server, micro.Config{Name: remote.ServiceNameDefault, Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	replies := map[string]string{
		"garbage":  "<html>",
		"thinking": `{"content":[{"type":"thinking","thinking":"hm"}]}`,
	}
	for name, body := range replies {
		err := svc.AddEndpoint(name, micro.HandlerFunc(func(r micro.Request) { _ = r.Respond([]byte(body)) }),
			micro.WithEndpointSubject(remote.Subject(name)), micro.WithEndpointMetadata(map[string]string{remote.MetaParameters: "{}"}))
		if err != nil {
			t.Fatal(err)
		}
	}
	// An endpoint without tool metadata is not a tool.
	if err := svc.AddEndpoint("stats", micro.HandlerFunc(func(r micro.Request) { _ = r.Respond(nil) })); err != nil {
		t.Fatal(err)
	}
	if err := b.server.Flush(); err != nil {
		t.Fatal(err)
	}
	list := b.discover(t, remote.DiscoverConfig{}, 1)
	if len(list) != 2 {
		t.Fatalf("discovered %v, want garbage and thinking", list.Specs())
	}
	for _, tool := range list {
		_, err := tool.Call(t.Context(), tools.Call{ID: "c"})
		e := remoteErr(t, err, remote.ErrBadReply)
		if want := "tool " + tool.Spec().Name + " sent a malformed reply: "; !strings.HasPrefix(e.Error(), want) {
			t.Fatalf("error = %q, want prefix %q", e.Error(), want)
		}
	}
}

func TestHugeResult(t *testing.T) {
	t.Parallel()
	// NATS' default max payload (the embedded server allows 8 MiB).
	b := setupMaxPayload(t, 1<<20)
	maxPayload := int(b.client.MaxPayload())
	ascii := strings.Repeat("0123456789abcdef\n", 600_000/17) // over 400 000 chars, under 1 MiB
	wide := strings.Repeat("漢", 500_000)                      // 1.5 MB: 400 000 chars do not fit either
	blob := strings.Repeat("x", maxPayload)                   // fits nowhere
	b.serve(t, b.server, remote.ServiceConfig{},
		newTool("cat", func(_ context.Context, c tools.Call) (tools.Result, error) {
			if c.Args["wide"] == true {
				return tools.TextResult(wide), nil
			}
			return tools.TextResult(ascii), nil
		}),
		newTool("dump", func(context.Context, tools.Call) (tools.Result, error) {
			return tools.Result{Content: []message.Block{message.Text("ok")}, Details: map[string]any{"blob": blob}}, nil
		}))
	list := b.discover(t, remote.DiscoverConfig{}, 2)
	cat, _ := list.Lookup("cat")
	for _, wideText := range []bool{false, true} {
		res, err := cat.Call(t.Context(), tools.Call{Args: map[string]any{"wide": wideText}})
		if err != nil {
			t.Fatal(err)
		}
		got := text(res)
		if !strings.HasSuffix(got, remote.TruncationNotice) {
			t.Fatalf("wide=%v: result of %d bytes does not end with the notice", wideText, len(got))
		}
		if n := len([]rune(got)); n > remote.MaxResultCharsDefault+len([]rune(remote.TruncationNotice)) || n < 100_000 {
			t.Fatalf("wide=%v: result has %d chars", wideText, n)
		}
		if len(got) > maxPayload {
			t.Fatalf("wide=%v: result of %d bytes is over the max payload %d", wideText, len(got), maxPayload)
		}
	}
	dump, _ := list.Lookup("dump")
	_, err := dump.Call(t.Context(), tools.Call{})
	if e := remoteErr(t, err, remote.ErrToolFailed); e.Code != remote.CodeTooLarge {
		t.Fatalf("code = %q, error %q", e.Code, e)
	}
	// Arguments that cannot be sent fail before the request.
	_, err = cat.Call(t.Context(), tools.Call{Args: map[string]any{"q": blob}})
	remoteErr(t, err, nats.ErrMaxPayload)
}

// setupMaxPayload is setup with a server whose max_payload is n.
func setupMaxPayload(t *testing.T, n int32) *bundle {
	t.Helper()
	no := false
	srv, err := embedded.Start(embedded.Config{Name: "test", DataDir: t.TempDir(), SyncAlways: &no, MaxPayload: n})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	url := srv.ClientURL()
	return &bundle{
		url:    url,
		server: natstest.Connect(t, url),
		client: natstest.Connect(t, url),
		log:    zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
	}
}

func TestConcurrentCalls(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 32
	// Every call waits until all n run at once, so the test only ends if
	// the service runs them concurrently.
	var running sync.WaitGroup
	running.Add(n)
	b.serve(t, b.server, remote.ServiceConfig{}, newTool("echo", func(ctx context.Context, c tools.Call) (tools.Result, error) {
		running.Done()
		running.Wait()
		return echo(ctx, c)
	}))
	tool := b.lookup(t, "echo", remote.DiscoverConfig{})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			q := fmt.Sprint(i)
			res, err := tool.Call(t.Context(), tools.Call{ID: q, Args: map[string]any{"q": q}})
			if err == nil && text(res) != "echo "+q {
				err = fmt.Errorf("call %d got %q", i, text(res))
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestPartialResults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.serve(t, b.server, remote.ServiceConfig{}, newTool("build", func(_ context.Context, c tools.Call) (tools.Result, error) {
		for i := range 3 {
			c.Update(tools.TextResult(fmt.Sprintf("step %d", i)))
		}
		return tools.TextResult("built"), nil
	}))
	tool := b.lookup(t, "build", remote.DiscoverConfig{})
	var got []string
	res, err := tool.Call(t.Context(), tools.Call{ID: "c", Update: func(p tools.Result) { got = append(got, text(p)) }})
	if err != nil {
		t.Fatal(err)
	}
	if text(res) != "built" || strings.Join(got, ",") != "step 0,step 1,step 2" {
		t.Fatalf("result %q, updates %q", text(res), got)
	}
}

func TestServeRejectsBadTools(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		name string
		ts   []tools.Tool
		cfg  remote.ServiceConfig
	}{
		{"space in name", []tools.Tool{newTool("read file", echo)}, remote.ServiceConfig{}},
		{"dot in name", []tools.Tool{newTool("fs.read", echo)}, remote.ServiceConfig{}},
		{"empty name", []tools.Tool{newTool("", echo)}, remote.ServiceConfig{}},
		{"name of 65", []tools.Tool{newTool(strings.Repeat("a", 65), echo)}, remote.ServiceConfig{}},
		{"name twice", []tools.Tool{newTool("echo", echo), newTool("echo", echo)}, remote.ServiceConfig{}},
		{"bad version", []tools.Tool{newTool("echo", echo)}, remote.ServiceConfig{Version: "v1"}},
		{"bad service name", []tools.Tool{newTool("echo", echo)}, remote.ServiceConfig{Name: "my.tools"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if svc, err := remote.Serve(b.server, tc.cfg, tc.ts...); err == nil {
				_ = svc.Stop()
				t.Fatal("Serve accepted it")
			}
		})
	}
	if _, err := remote.NewRegistry(b.client, remote.DiscoverConfig{Services: []string{"a.>"}}); err == nil {
		t.Fatal("NewRegistry accepted a wildcard service name")
	}
}

func TestDiscoverWithoutServicesReturnsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// With a window of a minute, only the no-responders status can end
	// discovery before the test's deadline.
	list, err := remote.Discover(t.Context(), b.client, remote.DiscoverConfig{Window: time.Minute, Services: []string{"a", "b"}})
	if err != nil || len(list) != 0 {
		t.Fatalf("Discover = %v, %v; want nothing", list, err)
	}
}

func TestDiscoverOtherServiceNames(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.serve(t, b.server, remote.ServiceConfig{Name: "browser"}, newTool("open", echo))
	b.serve(t, b.server, remote.ServiceConfig{}, newTool("echo", echo))
	if list := b.discover(t, remote.DiscoverConfig{}, 1); len(list) != 1 || list[0].Spec().Name != "echo" {
		t.Fatalf("default discovery found %v", list.Specs())
	}
	b.discover(t, remote.DiscoverConfig{Services: []string{"browser", remote.ServiceNameDefault}}, 2)
}

func TestRefusedCallIsResentOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A hand-written instance that refuses calls as a stopping Service
	// does: 503, the call not run.
	svc, err := micro.AddService(b.server, micro.Config{Name: remote.ServiceNameDefault, Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	var requests [2]atomic.Int32
	for i, name := range []string{"flaky", "down"} {
		err := svc.AddEndpoint(name, micro.HandlerFunc(func(r micro.Request) {
			if n := requests[i].Add(1); name == "down" || n == 1 {
				_ = r.Error(remote.CodeUnavailable, "tool "+name+" is not available: the process serving it is stopping", nil)
				return
			}
			_ = r.Respond([]byte(`{"content":[{"type":"text","text":"ok"}]}`))
		}), micro.WithEndpointSubject(remote.Subject(name)), micro.WithEndpointMetadata(map[string]string{remote.MetaParameters: "{}"}))
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := b.server.Flush(); err != nil {
		t.Fatal(err)
	}
	list := b.discover(t, remote.DiscoverConfig{}, 1)
	down, _ := list.Lookup("down")
	flaky, _ := list.Lookup("flaky")

	if res, err := flaky.Call(t.Context(), tools.Call{}); err != nil || text(res) != "ok" {
		t.Fatalf("flaky: %+v, %v", res, err)
	}
	_, err = down.Call(t.Context(), tools.Call{})
	if e := remoteErr(t, err, remote.ErrUnavailable); e.Code != remote.CodeUnavailable {
		t.Fatalf("down: code %q", e.Code)
	}
	if f, d := requests[0].Load(), requests[1].Load(); f != 2 || d != 2 {
		t.Fatalf("requests: flaky %d, down %d; want each sent twice", f, d)
	}
}

// TestResultImagesCapped: a result keeps at most MaxResultImages images of
// MaxResultImageBytes (decoded) in all, in order; each other image, and
// one whose MIME type is not an image's, becomes a note the model sees,
// and no block carries fields beyond its type's.
func TestResultImagesCapped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	small := base64.StdEncoding.EncodeToString(make([]byte, 1000))
	big := base64.StdEncoding.EncodeToString(make([]byte, remote.MaxResultImageBytes+1)) // alone over the byte cap
	half := base64.StdEncoding.EncodeToString(make([]byte, remote.MaxResultImageBytes/2))
	b.serve(t, b.server, remote.ServiceConfig{},
		newTool("many", func(context.Context, tools.Call) (tools.Result, error) {
			var content []message.Block
			for range remote.MaxResultImages + 2 {
				content = append(content, message.Image("image/png", small))
			}
			return tools.Result{Content: content}, nil
		}),
		newTool("large", func(context.Context, tools.Call) (tools.Result, error) {
			return tools.Result{Content: []message.Block{
				message.Image("image/png", big),
				message.Image("image/jpeg", half), message.Image("image/jpeg", half), message.Image("image/jpeg", half),
				message.Image("text/html", small),
				{Type: message.BlockText, Text: "ok", Extra: map[string]any{"smuggled": strings.Repeat("x", 64<<10)}},
			}}, nil
		}))
	list := b.discover(t, remote.DiscoverConfig{}, 2)
	call := func(name string) tools.Result {
		t.Helper()
		tool, _ := list.Lookup(name)
		res, err := tool.Call(t.Context(), tools.Call{ID: "c"})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	shape := func(res tools.Result) string {
		var parts []string
		for _, b := range res.Content {
			if b.Extra != nil {
				t.Fatalf("block %+v keeps fields beyond its type's", b.Extra)
			}
			if b.Type == message.BlockImage {
				parts = append(parts, "img")
			} else {
				parts = append(parts, b.Text)
			}
		}
		return strings.Join(parts, " | ")
	}
	note := "omitted: a tool result may carry 8 images of 2.0 MB in all]"
	want := strings.Repeat("img | ", remote.MaxResultImages) + "[image 9 (image/png, 1000 bytes) " + note + " | [image 10 (image/png, 1000 bytes) " + note
	if got := shape(call("many")); got != want {
		t.Fatalf("many:\n got %s\nwant %s", got, want)
	}
	want = "[image 1 (image/png, 2.0 MB) " + note + " | img | img | [image 4 (image/jpeg, 1.0 MB) " + note +
		" | [image 5 omitted: its MIME type is not image/<subtype>] | ok"
	if got := shape(call("large")); got != want {
		t.Fatalf("large:\n got %s\nwant %s", got, want)
	}
}
