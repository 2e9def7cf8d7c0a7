package openai

import "testing"

// BenchmarkBuildChatRequest: see wiretest.Wire.BenchBuild.
func BenchmarkBuildChatRequest(b *testing.B) { chatWire.BenchBuild(b) }

// BenchmarkChatTurns: see wiretest.Wire.BenchTurns.
func BenchmarkChatTurns(b *testing.B) { chatWire.BenchTurns(b) }
