package blockchunk

import (
	"encoding/json"
	"testing"

	"github.com/lanefleet/lanefleet/internal/conformance"
)

type chunkerCase struct {
	Chunking struct {
		MinChars         int    `json:"minChars"`
		MaxChars         int    `json:"maxChars"`
		BreakPreference  string `json:"breakPreference"`
		FlushOnParagraph bool   `json:"flushOnParagraph"`
	} `json:"chunking"`
	Steps []struct {
		Append *string `json:"append"`
		Drain  *struct {
			Force bool `json:"force"`
		} `json:"drain"`
	} `json:"steps"`
}

type drainResult struct {
	Force       bool     `json:"force"`
	Emitted     []string `json:"emitted"`
	BufferAfter string   `json:"bufferAfter"`
}

func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, "block-chunker", func(t *testing.T, cs conformance.Case) {
		expanded, err := json.Marshal(conformance.Decode(t, cs.Input))
		if err != nil {
			t.Fatal(err)
		}
		var in chunkerCase
		conformance.Strict(t, expanded, &in)
		c := New(Config{
			MinChars:         in.Chunking.MinChars,
			MaxChars:         in.Chunking.MaxChars,
			BreakPreference:  BreakPreference(in.Chunking.BreakPreference),
			FlushOnParagraph: in.Chunking.FlushOnParagraph,
		})
		drains := []drainResult{}
		for _, st := range in.Steps {
			if st.Append != nil {
				c.Append(*st.Append)
			}
			if st.Drain != nil {
				d := drainResult{Force: st.Drain.Force, Emitted: []string{}}
				c.Drain(st.Drain.Force, func(b string) { d.Emitted = append(d.Emitted, b) })
				d.BufferAfter = c.Buffered()
				drains = append(drains, d)
			}
		}
		conformance.Check(t, map[string]any{"drains": drains}, conformance.Decode(t, cs.Expected))
	})
}
