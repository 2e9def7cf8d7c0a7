package fallback

import (
	"context"
	"errors"
)

// ErrNoImageModel is returned by RunImage when no image model is configured.
// Its text is the reference's user-facing sentence.
var ErrNoImageModel = errors.New("No image model configured. Set agents.defaults.imageModel.primary or agents.defaults.imageModel.fallbacks.")

// ImageCandidates lists the image models to try: override when non-blank,
// else cfg.Primary (agents.defaults.imageModel.primary), then cfg.Fallbacks;
// duplicates dropped. cfg may be nil.
func ImageCandidates(cfg *Config, override string) []Candidate {
	var out []Candidate
	add := func(raw string) {
		c, ok := cfg.ParseRef(raw, DefaultProvider)
		if !ok {
			return
		}
		for _, e := range out {
			if e == c {
				return
			}
		}
		out = append(out, c)
	}
	if override != "" {
		add(override)
	} else if cfg != nil {
		add(cfg.Primary)
	}
	if cfg != nil {
		for _, raw := range cfg.Fallbacks {
			add(raw)
		}
	}
	return out
}

// RunImage is the image-model fallback: no cooldown checks, and any error
// but a user abort (cls.Abort) moves on to the next candidate. With at most
// one failed attempt its error is returned as is, otherwise an
// *ExhaustedError labelled "image models". cls may be nil (no error is an
// abort).
func RunImage(ctx context.Context, cfg *Config, override string, cls Classifier, fn func(ctx context.Context, c Candidate) error) (Result, error) {
	cands := ImageCandidates(cfg, override)
	if len(cands) == 0 {
		return Result{}, ErrNoImageModel
	}
	var attempts []Attempt
	var last error
	for _, c := range cands {
		if ctx.Err() != nil {
			return Result{Attempts: attempts}, context.Cause(ctx)
		}
		err := fn(ctx, c)
		if err == nil {
			return Result{Candidate: c, Attempts: attempts}, nil
		}
		if cls != nil && cls.Classify(err).Abort {
			return Result{Attempts: attempts}, err
		}
		last = err
		attempts = append(attempts, Attempt{Candidate: c, Error: err.Error()})
	}
	if len(attempts) <= 1 {
		return Result{Attempts: attempts}, last
	}
	return Result{Attempts: attempts}, &ExhaustedError{Attempts: attempts, Candidates: len(cands), Last: last, Label: "image models"}
}
