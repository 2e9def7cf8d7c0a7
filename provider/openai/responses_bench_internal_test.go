package openai

import "testing"

// BenchmarkBuildResponsesRequest: see wiretest.Wire.BenchBuild.
func BenchmarkBuildResponsesRequest(b *testing.B) { respWire.BenchBuild(b) }
