package guard

import (
	"encoding/json"
	"testing"

	"github.com/lanefleet/lanefleet/ecmatext"
	"github.com/lanefleet/lanefleet/internal/conformance"
	"github.com/lanefleet/lanefleet/message"
)

// decodeInto expands a case's input and unmarshals it into v.
func decodeInto(t *testing.T, raw json.RawMessage, v any) {
	t.Helper()
	data, err := json.Marshal(conformance.Decode(t, raw))
	if err != nil {
		t.Fatal(err)
	}
	conformance.Strict(t, data, v)
}

func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, "context-window-guard", func(t *testing.T, c conformance.Case) {
		var in struct {
			Provider           string  `json:"provider"`
			ModelID            string  `json:"modelId"`
			ModelContextWindow float64 `json:"modelContextWindow"`
			DefaultTokens      float64 `json:"defaultTokens"`
			WarnBelowTokens    float64 `json:"warnBelowTokens"`
			HardMinTokens      float64 `json:"hardMinTokens"`
			Cfg                struct {
				Models struct {
					Providers map[string]struct {
						Models []struct {
							ID            string  `json:"id"`
							ContextWindow float64 `json:"contextWindow"`
						} `json:"models"`
					} `json:"providers"`
				} `json:"models"`
				Agents struct {
					Defaults struct {
						ContextTokens float64 `json:"contextTokens"`
					} `json:"defaults"`
				} `json:"agents"`
			} `json:"cfg"`
		}
		decodeInto(t, c.Input, &in)
		cfg := WindowConfig{
			AgentContextTokens: in.Cfg.Agents.Defaults.ContextTokens,
			DefaultTokens:      in.DefaultTokens,
			WarnBelowTokens:    in.WarnBelowTokens,
			HardMinTokens:      in.HardMinTokens,
			ModelWindows:       map[string]map[string]float64{},
		}
		for p, pc := range in.Cfg.Models.Providers {
			cfg.ModelWindows[p] = map[string]float64{}
			for _, m := range pc.Models {
				if _, dup := cfg.ModelWindows[p][m.ID]; !dup {
					cfg.ModelWindows[p][m.ID] = m.ContextWindow
				}
			}
		}
		got := ResolveWindow(in.Provider, in.ModelID, in.ModelContextWindow, cfg)
		conformance.Check(t, got, conformance.Decode(t, c.Expected))
	})

	conformance.Run(t, "context-guard", func(t *testing.T, c conformance.Case) {
		var in struct {
			ContextWindowTokens int `json:"contextWindowTokens"`
			Messages            []struct {
				Role    string          `json:"role"`
				ID      string          `json:"id"`
				Text    string          `json:"text"`
				Content json.RawMessage `json:"content"`
				Details any             `json:"details"`
			} `json:"messages"`
		}
		decodeInto(t, c.Input, &in)
		msgs := make([]message.Message, len(in.Messages))
		for i, m := range in.Messages {
			switch m.Role {
			case "user":
				msgs[i] = message.User(m.Text, 0)
			case "legacyTool":
				msgs[i] = message.Message{Role: RoleLegacyTool, ToolCallID: m.ID, Content: message.PlainText(m.Text), Details: m.Details}
			case "toolResult":
				msgs[i] = message.Message{Role: message.RoleToolResult, ToolCallID: m.ID, Content: message.BlocksOf(message.Text(m.Text)), Details: m.Details}
			default:
				msgs[i] = message.Message{Role: message.Role(m.Role), Content: message.BlocksOf(message.Text(m.Text))}
			}
		}
		for i, m := range in.Messages {
			// Cases may spell the content out instead of giving one text.
			if len(m.Content) > 0 {
				raw, _ := json.Marshal(map[string]any{"role": "user", "content": json.RawMessage(m.Content)})
				var um message.Message
				if err := json.Unmarshal(raw, &um); err != nil {
					t.Fatal(err)
				}
				msgs[i].Content = um.Content
			}
		}
		out, res := GuardContext(msgs, in.ContextWindowTokens)
		var got struct {
			Budgets  Budgets          `json:"budgets"`
			Messages []map[string]any `json:"messages"`
		}
		got.Budgets = res.Budgets
		for i, m := range out {
			o := map[string]any{"role": string(m.Role)}
			if !IsToolResult(m) {
				o["unchanged"] = res.Messages[i].Outcome == OutcomeUnchanged
			} else {
				o["kind"] = string(res.Messages[i].Outcome)
				o["textLength"] = TextLen(toolContent(m))
				o["detailsRemoved"] = res.Messages[i].DetailsRemoved
				if res.Messages[i].Outcome == OutcomeTruncated {
					o["keptPrefixLength"] = res.Messages[i].KeptPrefix
				}
			}
			got.Messages = append(got.Messages, o)
		}
		conformance.Check(t, got, conformance.Decode(t, c.Expected))
	})

	conformance.Run(t, "tool-result-truncation", func(t *testing.T, c conformance.Case) {
		var in struct {
			Op                  string            `json:"op"`
			ContextWindowTokens int               `json:"contextWindowTokens"`
			Text                string            `json:"text"`
			MaxChars            int               `json:"maxChars"`
			Suffix              string            `json:"suffix"`
			MinKeepChars        int               `json:"minKeepChars"`
			Blocks              []message.Block   `json:"blocks"`
			Messages            []message.Message `json:"messages"`
		}
		decodeInto(t, c.Input, &in)
		want := conformance.Decode(t, c.Expected)
		opts := TruncateOptions{Notice: in.Suffix, MinKeep: in.MinKeepChars}
		var got any
		switch in.Op {
		case "maxChars":
			got = map[string]any{"maxChars": MaxToolResultChars(in.ContextWindowTokens)}
		case "constants":
			got = map[string]any{
				"defaultSuffix":                TruncationNotice,
				"defaultSuffixUtf16Length":     ecmatext.Len(TruncationNotice),
				"persistenceSuffix":            PersistenceNotice,
				"persistenceSuffixUtf16Length": ecmatext.Len(PersistenceNotice),
				"hardMaxChars":                 HardMaxToolResultChars,
				"minKeepChars":                 MinKeepChars,
			}
		case "truncateText":
			out, cut := TruncateText(in.Text, in.MaxChars, opts)
			if ecmatext.Len(out) != cut.Output {
				t.Errorf("output length %d, reported %d", ecmatext.Len(out), cut.Output)
			}
			if w, ok := want.(map[string]any); ok {
				if _, ok := w["keptEndsWithNewline"]; ok {
					// A description, not a value: check that the cut was at a newline.
					if !cut.CutAtNewline {
						t.Errorf("cut not at a newline")
					}
					delete(w, "keptEndsWithNewline")
				}
			}
			got = cutJSON(cut)
		case "truncateMessage":
			_, cuts, _ := TruncateContent(message.BlocksOf(in.Blocks...), in.MaxChars, opts)
			var blocks []any
			for _, cut := range cuts {
				blocks = append(blocks, cutJSON(cut))
			}
			got = map[string]any{"blocks": blocks}
		case "truncateMessages":
			_, res := TruncateToolResults(in.Messages, in.ContextWindowTokens)
			per := make([]any, len(in.Messages))
			for i, cuts := range res.PerMessage {
				if cuts == nil {
					continue
				}
				per[i] = map[string]any{"truncated": false}
				for _, cut := range cuts {
					if cut.Truncated {
						per[i] = cutJSON(cut)
						break
					}
				}
			}
			got = map[string]any{"truncatedCount": res.Truncated, "perMessage": per}
		default:
			t.Fatalf("unknown op %q", in.Op)
		}
		conformance.Check(t, got, want)
	})
}

// cutJSON renders a TextCut the way the cases describe one.
func cutJSON(c TextCut) map[string]any {
	if !c.Truncated {
		return map[string]any{"truncated": false, "outputLength": c.Output}
	}
	return map[string]any{"truncated": true, "keptPrefixLength": c.KeptPrefix, "outputLength": c.Output}
}
