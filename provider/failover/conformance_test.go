package failover_test

import (
	"path/filepath"
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

func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, "error-classification", classificationCase)
	conformance.Run(t, "thinking-fallback", thinkingCase)
}

// TestErrorObjects plays error-classification cases written for this
// package from runtime spec §15 (testdata/error-objects.json): the status
// table, statuses the table does not name, network error codes and
// timeout-like errors.
func TestErrorObjects(t *testing.T) {
	t.Parallel()
	for _, c := range conformance.LoadFile(t, filepath.Join("testdata", "error-objects.json")) {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			classificationCase(t, c)
		})
	}
}

func classificationCase(t *testing.T, c conformance.Case) {

	var in struct {
		Kind    string               `json:"kind"`
		Message *string              `json:"message"`
		Error   *conformance.JSError `json:"error"`
		Reason  string               `json:"reason"`
	}
	conformance.Strict(t, c.Input, &in)
	want := conformance.Decode(t, c.Expected)
	switch in.Kind {
	case "message":
		text := ""
		if in.Message != nil {
			text = *in.Message
		}
		conformance.Check(t, flagsObj(text), want)
		// What adapters and the run loop act on agrees with the
		// reference, apart from the texts ClassifyMessage documents.
		w := want.(map[string]any)["failoverReason"]
		if why, ok := failover.Differs(text); ok {
			t.Logf("ClassifyMessage differs on purpose: %s", why)
		} else if got := conformance.ReferenceReason(failover.ClassifyMessage(text)); got != w {
			t.Errorf("ClassifyMessage(%q) = %v, the reference's failover reason is %v", text, got, w)
		}
	case "errorObject":
		// The error the fleet sees in its place, classified as the
		// fallback loop and the run loop classify it.
		err := in.Error.Err()
		conformance.Check(t, map[string]any{
			"failoverReason": conformance.ReferenceReason(failover.ClassifyError(err)),
			"isTimeoutError": failover.IsTimeoutError(err),
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
}

func thinkingCase(t *testing.T, c conformance.Case) {

	var in struct {
		Message   *string  `json:"message"`
		Attempted []string `json:"attempted"`
	}
	conformance.Strict(t, c.Input, &in)
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
}
