package anthropic

import "testing"

// BenchmarkBuildRequest: see wiretest.Wire.BenchBuild.
func BenchmarkBuildRequest(b *testing.B) { wire.BenchBuild(b) }
