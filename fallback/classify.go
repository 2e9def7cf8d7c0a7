package fallback

import (
	"errors"

	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/failover"
)

// ProviderClassifier classifies the Go errors a run returns with
// provider/failover: a *provider.Error keeps its reason, status and message;
// other errors are classified by failover.ClassifyError. Cancellation
// (reason aborted) is a user abort unless it is timeout-like
// (failover.IsTimeoutError: then it is a timeout, as the reference treats
// an abort its request timer caused), a context overflow (by reason or by the
// reference's likely-overflow test on the text) stops the loop, and only
// failover reasons (failover.IsFailover) count as failover errors, with the
// reason's HTTP status when the error carries none.
var ProviderClassifier Classifier = ClassifierFunc(classifyProviderError)

func classifyProviderError(err error) Classification {
	r := failover.ClassifyError(err)
	if r == provider.ReasonAborted && failover.IsTimeoutError(err) {
		r = provider.ReasonTimeout
	}
	var c Classification
	var pe *provider.Error
	if errors.As(err, &pe) {
		c.Message = pe.Message
	}
	switch {
	case r == provider.ReasonAborted:
		c.Abort = true
		return c
	case r == provider.ReasonContextOverflow || failover.IsLikelyContextOverflow(err.Error()):
		c.ContextOverflow = true
		return c
	case !failover.IsFailover(r):
		return c
	}
	c.Reason = r
	if pe != nil && pe.Status != 0 {
		c.Status = pe.Status
	} else {
		c.Status = failover.StatusOf(r)
	}
	return c
}
