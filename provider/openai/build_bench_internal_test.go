package openai

import "testing"

// BenchmarkBuildChatRequest: see wiretest.Wire.BenchBuild.
func BenchmarkBuildChatRequest(b *testing.B) { chatWire.BenchBuild(b) }
