package failover_test

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/lanefleet/lanefleet/internal/conformance"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/failover"
)

func nullable(r provider.Reason) any {
	if r == "" {
		return nil
	}
	return string(r)
}

func flagsObj(text string) map[string]any {
	f := failover.Classify(text)
	out := map[string]any{
		"failoverReason":          nullable(f.FailoverReason),
		"contextOverflow":         f.ContextOverflow,
		"likelyContextOverflow":   f.LikelyContextOverflow,
		"compactionFailure":       f.CompactionFailure,
		"rateLimit":               f.RateLimit,
		"overloaded":              f.Overloaded,
		"billing":                 f.Billing,
		"auth":                    f.Auth,
		"authPermanent":           f.AuthPermanent,
		"timeout":                 f.Timeout,
		"format":                  f.Format,
		"transientHttp":           f.TransientHTTP,
		"htmlErrorPage":           f.HTMLErrorPage,
		"modelNotFound":           f.ModelNotFound,
		"missingToolCallInput":    f.MissingToolCallInput,
		"roleOrderingPromptError": f.RoleOrderingPromptError,
		"imageSize":               nil,
		"imageDimension":          nil,
		"userText":                failover.UserText(text, "", ""),
	}
	if f.ImageSizeMB != nil {
		out["imageSize"] = map[string]any{"maxMb": *f.ImageSizeMB}
	}
	if d := f.ImageDimension; d != nil {
		m := map[string]any{}
		if d.MaxDimensionPx >= 0 {
			m["maxDimensionPx"] = d.MaxDimensionPx
		}
		if d.MessageIndex >= 0 {
			m["messageIndex"] = d.MessageIndex
			m["contentIndex"] = d.ContentIndex
		}
		out["imageDimension"] = m
	}
	return out
}

type jsError struct {
	Name    string          `json:"name"`
	Message string          `json:"message"`
	Status  json.RawMessage `json:"status"`
	Code    string          `json:"code"`
	Reason  string          `json:"reason"`
	Cause   *jsError        `json:"cause"`
}

func (e *jsError) failure() failover.Failure {
	f := failover.Failure{Name: e.Name, Message: e.Message, Code: e.Code, Reason: provider.Reason(e.Reason)}
	if len(e.Status) > 0 {
		var n json.Number
		var s string
		if json.Unmarshal(e.Status, &n) == nil {
			i, _ := n.Int64()
			f.Status = int(i)
		} else if json.Unmarshal(e.Status, &s) == nil {
			f.Status, _ = strconv.Atoi(s)
		}
	}
	if e.Cause != nil {
		c := e.Cause.failure()
		f.Cause = &c
	}
	return f
}

func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, "error-classification", func(t *testing.T, c conformance.Case) {
		var in struct {
			Kind    string   `json:"kind"`
			Message *string  `json:"message"`
			Error   *jsError `json:"error"`
			Reason  string   `json:"reason"`
		}
		if err := json.Unmarshal(c.Input, &in); err != nil {
			t.Fatal(err)
		}
		want := conformance.Decode(t, c.Expected)
		switch in.Kind {
		case "message":
			text := ""
			if in.Message != nil {
				text = *in.Message
			}
			conformance.Check(t, flagsObj(text), want)
		case "errorObject":
			f := in.Error.failure()
			conformance.Check(t, map[string]any{
				"failoverReason": nullable(failover.ReasonOfFailure(f)),
				"isTimeoutError": failover.IsTimeoutFailure(f),
			}, want)
		case "reasonToStatus":
			var st any
			if s := failover.StatusOf(provider.Reason(in.Reason)); s != 0 {
				st = s
			}
			conformance.Check(t, map[string]any{"status": st}, want)
		default:
			t.Fatalf("unknown kind %q", in.Kind)
		}
	})
	conformance.Run(t, "thinking-fallback", func(t *testing.T, c conformance.Case) {
		var in struct {
			Message   *string  `json:"message"`
			Attempted []string `json:"attempted"`
		}
		if err := json.Unmarshal(c.Input, &in); err != nil {
			t.Fatal(err)
		}
		msg := ""
		if in.Message != nil {
			msg = *in.Message
		}
		var tried []provider.ThinkingLevel
		for _, a := range in.Attempted {
			tried = append(tried, provider.ThinkingLevel(a))
		}
		var got any
		if lv, ok := failover.ThinkingFallback(msg, tried); ok {
			got = string(lv)
		}
		conformance.Check(t, map[string]any{"fallback": got}, conformance.Decode(t, c.Expected))
	})
}
