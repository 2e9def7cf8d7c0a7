package anthropic

import "testing"

// BenchmarkBuildRequest: see wiretest.Wire.BenchBuild.
func BenchmarkBuildRequest(b *testing.B) { wire.BenchBuild(b) }

// BenchmarkTurns: see wiretest.Wire.BenchTurns.
func BenchmarkTurns(b *testing.B) { wire.BenchTurns(b) }
