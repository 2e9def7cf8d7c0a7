// Package guard holds the pure size decisions the run loop makes before and
// after a model call: the context-window guard (is the model's window big
// enough to run at all), the per-request tool-result context guard (shrink
// tool results so one request fits the window), the overflow-recovery and
// persistence truncation of tool results, and the tool loop's loop detector
// (Repeats: the same call failing the same way again and again stops the
// turn).
//
// Everything here takes values and returns values: no clock, no I/O, no
// globals. Lengths are counted in UTF-16 code units, as the reference runtime
// (JavaScript) counts them, so budgets and cut points match it exactly; a cut
// never splits a surrogate pair, so the output is always valid UTF-8.
package guard
