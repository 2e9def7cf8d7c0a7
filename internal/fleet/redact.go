package fleet

import (
	"context"
	"net/url"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/provider/catalog"
	"github.com/lanefleet/lanefleet/redact"
)

// secrets lists what the member must never publish or log: provider keys
// in the environment or given for the --openai-compatible server, every
// auth profile's key and tokens, the NATS password (given or in the URL)
// or token, the NKey seed and credentials files, and the skills' API keys.
func secrets(cfg Config, creds *authprofile.Store) []string {
	out := []string{cfg.Password, cfg.OpenAICompatibleKey}
	for _, p := range catalog.Providers() {
		for _, name := range p.KeyEnv {
			out = append(out, cfg.Env(name))
		}
	}
	if creds != nil {
		for _, p := range creds.Profiles {
			out = append(out, p.Key.Reveal(), p.Token.Reveal(), p.Access.Reveal(), p.Refresh.Reveal())
		}
	}
	for _, u := range strings.Split(cfg.NATSURL, ",") {
		if pu, err := url.Parse(strings.TrimSpace(u)); err == nil && pu.User != nil {
			pw, _ := pu.User.Password()
			out = append(out, pw)
			if pw == "" {
				out = append(out, pu.User.Username()) // a token
			}
		}
	}
	for _, f := range []string{cfg.NKeyFile, cfg.CredsFile} {
		if f == "" {
			continue
		}
		if b, err := os.ReadFile(f); err == nil {
			// Seeds and JWTs are single lines; the file's delimiters are not secret.
			for _, line := range strings.Split(string(b), "\n") {
				if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "-----") && !strings.Contains(line, " ") {
					out = append(out, line)
				}
			}
		}
	}
	for _, sc := range cfg.Skills {
		out = append(out, sc.APIKey)
	}
	return out
}

// redactingJS masks the member's secrets in every payload and header it
// publishes through JetStream: events, transcript records, settings and
// dead letters all leave the worker through here, so a provider error that
// echoes its key or a tool that prints a token never reaches a viewer, a
// transcript or a dead letter.
type redactingJS struct {
	jetstream.JetStream
	r *redact.Redactor
}

func (j redactingJS) Publish(ctx context.Context, subj string, data []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	return j.JetStream.Publish(ctx, subj, j.r.Bytes(data), opts...)
}

func (j redactingJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	return j.JetStream.PublishMsg(ctx, j.msg(m), opts...)
}

func (j redactingJS) PublishAsync(subj string, data []byte, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	return j.JetStream.PublishAsync(subj, j.r.Bytes(data), opts...)
}

func (j redactingJS) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	return j.JetStream.PublishMsgAsync(j.msg(m), opts...)
}

// msg returns m, or a masked copy when its data or a header holds a secret.
func (j redactingJS) msg(m *nats.Msg) *nats.Msg {
	data := j.r.Bytes(m.Data)
	var hdr nats.Header
	for k, vs := range m.Header {
		for i, v := range vs {
			if mv := j.r.String(v); mv != v {
				if hdr == nil {
					hdr = cloneHeader(m.Header)
				}
				hdr[k][i] = mv
			}
		}
	}
	if hdr == nil && (len(data) == 0 || &data[0] == &m.Data[0]) {
		return m
	}
	out := &nats.Msg{Subject: m.Subject, Reply: m.Reply, Data: data, Header: m.Header}
	if hdr != nil {
		out.Header = hdr
	}
	return out
}

func cloneHeader(h nats.Header) nats.Header {
	out := make(nats.Header, len(h))
	for k, vs := range h {
		out[k] = append([]string(nil), vs...)
	}
	return out
}
