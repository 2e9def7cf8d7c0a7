package governance

import (
	"math"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// price is tokens at perMillion USD per million tokens, in nano-dollars,
// rounded up (a reservation never holds less than the call may cost).
func price(perMillion float64, tokens int64) Nanos {
	if perMillion <= 0 || tokens <= 0 {
		return 0
	}
	return Nanos(math.Ceil(perMillion * float64(tokens) * (NanosPerUSD / 1e6)))
}

// WorstCase is the most a call may use: input tokens (all priced at the
// dearer of the input and cache-write prices) and maxOutput output tokens;
// a turn when it is the turn's first call.
func WorstCase(cost provider.ModelCost, input, maxOutput int64, firstCall bool) Amount {
	input, maxOutput = max(input, 0), max(maxOutput, 0)
	a := Amount{USD: price(max(cost.Input, cost.CacheWrite), input) + price(cost.Output, maxOutput), Tokens: input + maxOutput}
	if firstCall {
		a.Turns = 1
	}
	return a
}

// Real is what a call used: its tokens, priced at the model's catalog
// price; a turn when it is the turn's first call.
func Real(cost provider.ModelCost, u message.Usage, firstCall bool) Amount {
	in, out, cr, cw := max(u.Input, 0), max(u.Output, 0), max(u.CacheRead, 0), max(u.CacheWrite, 0)
	a := Amount{USD: price(cost.Input, in) + price(cost.Output, out) + price(cost.CacheRead, cr) + price(cost.CacheWrite, cw),
		Tokens: in + out + cr + cw}
	if firstCall {
		a.Turns = 1
	}
	return a
}
