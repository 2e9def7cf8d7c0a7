package events

import (
	"errors"
	"strings"
	"testing"
)

// TestRunChoicesOneVerdict: a model, thinking level or auth profile gets
// the same verdict and the same reason whether a message names it for its
// own turn, a settings message stores it, or a stored settings record
// holds it; only the field's path differs.
func TestRunChoicesOneVerdict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                     string
		model, thinking, profile string
		field                    string // offending field, "" = accepted
		reasonPart               string
	}{
		{name: "all set", model: "acme/m1", thinking: "high", profile: "acme:work-2"},
		{name: "thinking any case", thinking: "XHigh"},
		{name: "model at its bound", model: "a/" + strings.Repeat("m", maxModelRefBytes-2)},
		{name: "profile at its bound", profile: strings.Repeat("p", maxProfileBytes)},
		{name: "model without a slash", model: "gpt", field: "model", reasonPart: `"gpt" is not provider/model-id`},
		{name: "model without a provider", model: "/m1", field: "model", reasonPart: "not provider/model-id"},
		{name: "model without an id", model: "acme/", field: "model", reasonPart: "not provider/model-id"},
		{name: "model with a space", model: "acme/m 1", field: "model", reasonPart: "not provider/model-id"},
		{name: "model over its bound", model: "a/" + strings.Repeat("m", maxModelRefBytes-1), field: "model", reasonPart: "not provider/model-id"},
		{name: "model not UTF-8", model: "acme/\xff", field: "model", reasonPart: "not provider/model-id"},
		{name: "unknown thinking", thinking: "max", field: "thinking", reasonPart: `unknown thinking level "max"`},
		{name: "thinking padded", thinking: " high", field: "thinking", reasonPart: "unknown thinking level"},
		{name: "profile with a space", profile: "acme work", field: "authProfile", reasonPart: "is not an auth profile id (1-128 printable bytes, no spaces)"},
		{name: "profile with a control byte", profile: "acme\x7f", field: "authProfile", reasonPart: "not an auth profile id"},
		{name: "profile over its bound", profile: strings.Repeat("p", maxProfileBytes+1), field: "authProfile", reasonPart: "not an auth profile id"},
		{name: "profile not UTF-8", profile: "acme:\xff", field: "authProfile", reasonPart: "not an auth profile id"},
		{name: "model checked first", model: "gpt", thinking: "max", profile: "a b", field: "model", reasonPart: "not provider/model-id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			run := RunSettings{Model: tt.model, Thinking: tt.thinking, AuthProfile: tt.profile}
			paths := []struct {
				name, prefix string
				err          error
			}{
				// A message's own choices, decoded at the edge (msgpack
				// carries any bytes, so invalid UTF-8 reaches the check).
				{"message", "", decodePacked(t, map[string]any{"text": "a", "model": tt.model, "thinking": tt.thinking, "authProfile": tt.profile})},
				// A settings message storing them.
				{"settings message", "runSettings.", decodePacked(t, map[string]any{"runSettings": map[string]any{"model": tt.model, "thinking": tt.thinking, "authProfile": tt.profile}})},
				// A stored record holding them (what DecodeSettings checks).
				{"stored record", "runSettings.", (&Settings{Run: &run}).Validate()},
			}
			for _, p := range paths {
				if tt.field == "" {
					if p.err != nil {
						t.Errorf("%s: refused: %v", p.name, p.err)
					}
					continue
				}
				var de *DecodeError
				if !errors.As(p.err, &de) {
					t.Errorf("%s: got %v, want a *DecodeError", p.name, p.err)
					continue
				}
				if de.Field != p.prefix+tt.field || !strings.Contains(de.Reason, tt.reasonPart) {
					t.Errorf("%s: field %q reason %q; want field %q, reason with %q", p.name, de.Field, de.Reason, p.prefix+tt.field, tt.reasonPart)
				}
				if first := (*DecodeError)(nil); errors.As(paths[0].err, &first) && de.Reason != first.Reason {
					t.Errorf("%s: reason %q differs from a message's %q", p.name, de.Reason, first.Reason)
				}
			}
		})
	}
}

// decodePacked decodes fields (empty strings left out) as a msgpack
// inbound payload.
func decodePacked(t *testing.T, fields map[string]any) error {
	t.Helper()
	for k, v := range fields {
		switch v := v.(type) {
		case string:
			if v == "" {
				delete(fields, k)
			}
		case map[string]any:
			for kk, vv := range v {
				if vv == "" {
					delete(v, kk)
				}
			}
		}
	}
	_, err := DecodeInbound(ContentMsgpack, mustPack(t, fields), 0)
	return err
}
