package otlp

import (
	"encoding/binary"
	"math"

	"github.com/lanefleet/lanefleet/tracing"
)

// The OTLP trace protocol (opentelemetry/proto/collector/trace/v1 and
// trace/v1, common/v1, resource/v1), encoded by hand: the generated Go
// types import gRPC, which this exporter exists to keep out of the worker.
// Field numbers are the .proto files'; the tests decode what this writes
// with the generated types.

// Protobuf wire types.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

func appendTag(b []byte, field, wire int) []byte {
	return binary.AppendUvarint(b, uint64(field)<<3|uint64(wire))
}

// appendLen appends a length-delimited field, even an empty one (a
// message's presence, a oneof's choice).
func appendLen(b []byte, field int, v []byte) []byte {
	b = appendTag(b, field, wireBytes)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// appendString appends a string field unless it is empty (proto3 default).
func appendString(b []byte, field int, s string) []byte {
	if s == "" {
		return b
	}
	b = appendTag(b, field, wireBytes)
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendVarint(b []byte, field int, v uint64) []byte {
	if v == 0 {
		return b
	}
	return binary.AppendUvarint(appendTag(b, field, wireVarint), v)
}

func appendFixed64(b []byte, field int, v uint64) []byte {
	if v == 0 {
		return b
	}
	return binary.LittleEndian.AppendUint64(appendTag(b, field, wireFixed64), v)
}

func appendFixed32(b []byte, field int, v uint32) []byte {
	if v == 0 {
		return b
	}
	return binary.LittleEndian.AppendUint32(appendTag(b, field, wireFixed32), v)
}

// Span flags (Span.flags, Link.flags): the W3C trace flags in the low byte,
// and whether the parent (or linked) span context is remote.
const (
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200
)

// encodeRequest encodes an ExportTraceServiceRequest holding spans, grouped
// by resource and instrumentation scope.
func encodeRequest(spans []tracing.SpanData) []byte {
	type scopeKey struct {
		res   *tracing.Resource
		scope tracing.Scope
	}
	var (
		resources []*tracing.Resource
		scopes    = map[*tracing.Resource][]tracing.Scope{}
		byScope   = map[scopeKey][]*tracing.SpanData{}
	)
	for i := range spans {
		s := &spans[i]
		k := scopeKey{s.Resource, s.Scope}
		if _, ok := scopes[s.Resource]; !ok {
			resources = append(resources, s.Resource)
			scopes[s.Resource] = nil
		}
		if _, ok := byScope[k]; !ok {
			scopes[s.Resource] = append(scopes[s.Resource], k.scope)
		}
		byScope[k] = append(byScope[k], s)
	}
	var req []byte
	for _, r := range resources {
		var rs []byte
		rs = appendLen(rs, 1, encodeResource(r)) // ResourceSpans.resource
		for _, sc := range scopes[r] {
			var ss []byte
			ss = appendLen(ss, 1, encodeScope(sc)) // ScopeSpans.scope
			for _, s := range byScope[scopeKey{r, sc}] {
				ss = appendLen(ss, 2, encodeSpan(s)) // ScopeSpans.spans
			}
			rs = appendLen(rs, 2, ss) // ResourceSpans.scope_spans
		}
		req = appendLen(req, 1, rs) // ExportTraceServiceRequest.resource_spans
	}
	return req
}

func encodeResource(r *tracing.Resource) []byte {
	var b []byte
	if r == nil {
		return b
	}
	for _, kv := range r.Attributes {
		b = appendLen(b, 1, encodeKeyValue(kv))
	}
	return b
}

func encodeScope(sc tracing.Scope) []byte {
	var b []byte
	b = appendString(b, 1, sc.Name)
	b = appendString(b, 2, sc.Version)
	return b
}

func encodeSpan(s *tracing.SpanData) []byte {
	var b []byte
	sc := s.SpanContext
	b = appendLen(b, 1, sc.TraceID[:])
	b = appendLen(b, 2, sc.SpanID[:])
	b = appendString(b, 3, sc.State)
	flags := uint32(sc.Flags) | flagHasIsRemote
	if p := s.Parent; p.IsValid() {
		b = appendLen(b, 4, p.SpanID[:])
		if p.Remote {
			flags |= flagIsRemote
		}
	}
	b = appendString(b, 5, s.Name)
	b = appendVarint(b, 6, uint64(s.Kind)) // tracing.SpanKind numbers are OTLP's
	b = appendFixed64(b, 7, unixNano(s.Start.UnixNano()))
	b = appendFixed64(b, 8, unixNano(s.End.UnixNano()))
	for _, kv := range s.Attributes {
		b = appendLen(b, 9, encodeKeyValue(kv))
	}
	b = appendVarint(b, 10, uint64(max(s.DroppedAttributes, 0)))
	for _, ev := range s.Events {
		var e []byte
		e = appendFixed64(e, 1, unixNano(ev.Time.UnixNano()))
		e = appendString(e, 2, ev.Name)
		for _, kv := range ev.Attributes {
			e = appendLen(e, 3, encodeKeyValue(kv))
		}
		b = appendLen(b, 11, e)
	}
	b = appendVarint(b, 12, uint64(max(s.DroppedEvents, 0)))
	for _, l := range s.Links {
		var e []byte
		e = appendLen(e, 1, l.SpanContext.TraceID[:])
		e = appendLen(e, 2, l.SpanContext.SpanID[:])
		e = appendString(e, 3, l.SpanContext.State)
		for _, kv := range l.Attributes {
			e = appendLen(e, 4, encodeKeyValue(kv))
		}
		lflags := uint32(l.SpanContext.Flags) | flagHasIsRemote
		if l.SpanContext.Remote {
			lflags |= flagIsRemote
		}
		e = appendFixed32(e, 6, lflags)
		b = appendLen(b, 13, e)
	}
	b = appendVarint(b, 14, uint64(max(s.DroppedLinks, 0)))
	if st := s.Status; st.Code != tracing.StatusUnset || st.Description != "" {
		var e []byte
		e = appendString(e, 2, st.Description)
		e = appendVarint(e, 3, uint64(st.Code)) // tracing.StatusCode numbers are OTLP's
		b = appendLen(b, 15, e)
	}
	b = appendFixed32(b, 16, flags)
	return b
}

func unixNano(n int64) uint64 {
	if n < 0 {
		return 0
	}
	return uint64(n)
}

func encodeKeyValue(kv tracing.KeyValue) []byte {
	var b []byte
	b = appendString(b, 1, kv.Key)
	return appendLen(b, 2, encodeValue(kv.Value))
}

// encodeValue encodes an AnyValue: the oneof's field is written even when
// it holds the zero value, which is how the receiver knows its type.
func encodeValue(v tracing.Value) []byte {
	var b []byte
	switch v.Type {
	case tracing.TypeBool:
		var n uint64
		if v.Bool {
			n = 1
		}
		b = binary.AppendUvarint(appendTag(b, 2, wireVarint), n)
	case tracing.TypeInt64:
		b = binary.AppendUvarint(appendTag(b, 3, wireVarint), uint64(v.Int))
	case tracing.TypeFloat64:
		b = binary.LittleEndian.AppendUint64(appendTag(b, 4, wireFixed64), math.Float64bits(v.Float))
	case tracing.TypeString:
		b = appendLen(b, 1, []byte(v.Str))
	case tracing.TypeSlice:
		var arr []byte
		for _, e := range v.Slice {
			arr = appendLen(arr, 1, encodeValue(e))
		}
		b = appendLen(b, 5, arr)
	}
	return b
}
