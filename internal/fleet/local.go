package fleet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/internal/backoff"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/catalog"
	"github.com/lanefleet/lanefleet/provider/local"
)

// listBackoff is the wait between listings of a server that is not ready:
// 500ms longer each time, at most 5s.
var listBackoff = backoff.Policy{Base: 500 * time.Millisecond, Max: 5 * time.Second, Linear: true}

// loadCatalog returns the member's catalog: the built-in one, then the
// --openai-compatible server's models (listed now), then the models file,
// which may change any of them. served is the server's models in its
// order (nil without a server).
func loadCatalog(ctx context.Context, cfg Config, log zerolog.Logger) (cat *catalog.Catalog, served []provider.Model, err error) {
	cat = catalog.Builtin()
	if cfg.OpenAICompatible != "" {
		if served, err = listServer(ctx, cfg, log); err != nil {
			return nil, nil, err
		}
		cat = cat.With(served...)
	}
	if cfg.ModelsFile != "" {
		if cat, err = cat.LoadFile(cfg.ModelsFile); err != nil {
			return nil, nil, fmt.Errorf("fleet: models file: %w", err)
		}
		// The file may have changed the server's models.
		for i, m := range served {
			served[i], _ = cat.Lookup(m.Ref())
		}
	}
	return cat, served, nil
}

// listServer lists the --openai-compatible server's models. A server that
// does not answer yet (down, or still loading a model) is asked again
// until cfg.OpenAICompatibleWait has passed; an answer that will not
// change (a refused key, a wrong URL, no models) fails at once.
func listServer(ctx context.Context, cfg Config, log zerolog.Logger) ([]provider.Model, error) {
	base, err := local.BaseURL(cfg.OpenAICompatible)
	if err != nil {
		return nil, fmt.Errorf("fleet: --openai-compatible: %w", err)
	}
	s := local.Server{BaseURL: base, Key: provider.Secret(cfg.OpenAICompatibleKey)}
	deadline := time.Now().Add(cfg.OpenAICompatibleWait)
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, listAttemptTimeout)
		ms, err := s.Models(actx)
		cancel()
		if err == nil {
			ids := make([]string, len(ms))
			for i, m := range ms {
				ids[i] = m.Ref()
			}
			log.Info().Str("url", base).Int("count", len(ms)).Str("models", strings.Join(ids[:min(len(ids), 20)], ", ")).Msg("openai-compatible server")
			return ms, nil
		}
		left := time.Until(deadline)
		if !transient(err) || left <= 0 || ctx.Err() != nil {
			hint := ""
			if transient(err) && cfg.OpenAICompatibleWait == 0 {
				hint = " (start the server first, or give it time with --openai-compatible-wait)"
			}
			return nil, fmt.Errorf("fleet: --openai-compatible: %w%s", err, hint)
		}
		wait := min(listBackoff.Delay(attempt), left)
		log.Warn().Err(err).Dur("retry_in_ms", wait).Msg("openai-compatible server not ready, waiting")
		if backoff.Sleep(ctx, wait) != nil {
			return nil, fmt.Errorf("fleet: --openai-compatible: %w", ctx.Err())
		}
	}
}

// transient reports whether a listing may succeed if asked again: the
// server did not answer (refused, reset, timed out) or answered 5xx.
func transient(err error) bool {
	var se *local.StatusError
	if errors.As(err, &se) {
		return se.Status >= 500
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded)
}

// openAIBaseURLHint explains OPENAI_BASE_URL set without an OpenAI key: it
// moves the openai provider, which speaks the Responses API with a key; it
// does not make a keyless local server the model. Empty when it does not
// apply.
func openAIBaseURLHint(env func(string) string) string {
	if strings.TrimSpace(env("OPENAI_BASE_URL")) == "" || strings.TrimSpace(env("OPENAI_API_KEY")) != "" {
		return ""
	}
	return "OPENAI_BASE_URL is set without OPENAI_API_KEY: it only moves the openai provider (the Responses API, with a key); " +
		"for a local Chat Completions server (llama.cpp, vLLM, Ollama, LM Studio) use --openai-compatible URL or OPENAI_COMPATIBLE_BASE_URL"
}
