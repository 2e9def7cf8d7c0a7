package otlp

import (
	"encoding/binary"
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
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
func encodeRequest(spans []sdktrace.ReadOnlySpan) []byte {
	type scopeKey struct {
		res   *resource.Resource
		scope instrumentation.Scope
	}
	var (
		resources []*resource.Resource
		scopes    = map[*resource.Resource][]instrumentation.Scope{}
		byScope   = map[scopeKey][]sdktrace.ReadOnlySpan{}
	)
	for _, s := range spans {
		r, sc := s.Resource(), s.InstrumentationScope()
		k := scopeKey{r, instrumentation.Scope{Name: sc.Name, Version: sc.Version, SchemaURL: sc.SchemaURL}}
		if _, ok := scopes[r]; !ok {
			resources = append(resources, r)
			scopes[r] = nil
		}
		if _, ok := byScope[k]; !ok {
			scopes[r] = append(scopes[r], k.scope)
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
			ss = appendString(ss, 3, sc.SchemaURL)
			rs = appendLen(rs, 2, ss) // ResourceSpans.scope_spans
		}
		if r != nil {
			rs = appendString(rs, 3, r.SchemaURL())
		}
		req = appendLen(req, 1, rs) // ExportTraceServiceRequest.resource_spans
	}
	return req
}

func encodeResource(r *resource.Resource) []byte {
	var b []byte
	if r == nil {
		return b
	}
	for _, kv := range r.Attributes() {
		b = appendLen(b, 1, encodeKeyValue(kv))
	}
	return b
}

func encodeScope(sc instrumentation.Scope) []byte {
	var b []byte
	b = appendString(b, 1, sc.Name)
	b = appendString(b, 2, sc.Version)
	return b
}

func encodeSpan(s sdktrace.ReadOnlySpan) []byte {
	var b []byte
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = appendLen(b, 1, tid[:])
	b = appendLen(b, 2, sid[:])
	b = appendString(b, 3, sc.TraceState().String())
	flags := uint32(sc.TraceFlags()) | flagHasIsRemote
	if p := s.Parent(); p.IsValid() {
		psid := p.SpanID()
		b = appendLen(b, 4, psid[:])
		if p.IsRemote() {
			flags |= flagIsRemote
		}
	}
	b = appendString(b, 5, s.Name())
	b = appendVarint(b, 6, uint64(s.SpanKind())) // trace.SpanKind numbers are OTLP's
	b = appendFixed64(b, 7, unixNano(s.StartTime().UnixNano()))
	b = appendFixed64(b, 8, unixNano(s.EndTime().UnixNano()))
	for _, kv := range s.Attributes() {
		b = appendLen(b, 9, encodeKeyValue(kv))
	}
	b = appendVarint(b, 10, uint64(max(s.DroppedAttributes(), 0)))
	for _, ev := range s.Events() {
		var e []byte
		e = appendFixed64(e, 1, unixNano(ev.Time.UnixNano()))
		e = appendString(e, 2, ev.Name)
		for _, kv := range ev.Attributes {
			e = appendLen(e, 3, encodeKeyValue(kv))
		}
		e = appendVarint(e, 4, uint64(max(ev.DroppedAttributeCount, 0)))
		b = appendLen(b, 11, e)
	}
	b = appendVarint(b, 12, uint64(max(s.DroppedEvents(), 0)))
	for _, l := range s.Links() {
		var e []byte
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		e = appendLen(e, 1, ltid[:])
		e = appendLen(e, 2, lsid[:])
		e = appendString(e, 3, l.SpanContext.TraceState().String())
		for _, kv := range l.Attributes {
			e = appendLen(e, 4, encodeKeyValue(kv))
		}
		e = appendVarint(e, 5, uint64(max(l.DroppedAttributeCount, 0)))
		lflags := uint32(l.SpanContext.TraceFlags()) | flagHasIsRemote
		if l.SpanContext.IsRemote() {
			lflags |= flagIsRemote
		}
		e = appendFixed32(e, 6, lflags)
		b = appendLen(b, 13, e)
	}
	b = appendVarint(b, 14, uint64(max(s.DroppedLinks(), 0)))
	if st := s.Status(); st.Code != codes.Unset || st.Description != "" {
		var e []byte
		e = appendString(e, 2, st.Description)
		e = appendVarint(e, 3, statusCode(st.Code))
		b = appendLen(b, 15, e)
	}
	b = appendFixed32(b, 16, flags)
	return b
}

// statusCode maps an OpenTelemetry status code to OTLP's (UNSET 0, OK 1,
// ERROR 2), which numbers them differently.
func statusCode(c codes.Code) uint64 {
	switch c {
	case codes.Ok:
		return 1
	case codes.Error:
		return 2
	}
	return 0
}

func unixNano(n int64) uint64 {
	if n < 0 {
		return 0
	}
	return uint64(n)
}

func encodeKeyValue(kv attribute.KeyValue) []byte {
	var b []byte
	b = appendString(b, 1, string(kv.Key))
	return appendLen(b, 2, encodeValue(kv.Value))
}

// encodeValue encodes an AnyValue: the oneof's field is written even when
// it holds the zero value, which is how the receiver knows its type.
func encodeValue(v attribute.Value) []byte {
	var b []byte
	switch v.Type() {
	case attribute.BOOL:
		var n uint64
		if v.AsBool() {
			n = 1
		}
		b = binary.AppendUvarint(appendTag(b, 2, wireVarint), n)
	case attribute.INT64:
		b = binary.AppendUvarint(appendTag(b, 3, wireVarint), uint64(v.AsInt64()))
	case attribute.FLOAT64:
		b = binary.LittleEndian.AppendUint64(appendTag(b, 4, wireFixed64), math.Float64bits(v.AsFloat64()))
	case attribute.STRING:
		b = appendLen(b, 1, []byte(v.AsString()))
	case attribute.BYTESLICE:
		b = appendLen(b, 7, v.AsByteSlice())
	case attribute.BOOLSLICE, attribute.INT64SLICE, attribute.FLOAT64SLICE, attribute.STRINGSLICE, attribute.SLICE:
		var arr []byte
		for _, e := range sliceValues(v) {
			arr = appendLen(arr, 1, encodeValue(e))
		}
		b = appendLen(b, 5, arr)
	case attribute.MAP:
		var list []byte
		for _, kv := range v.AsMap() {
			list = appendLen(list, 1, encodeKeyValue(kv))
		}
		b = appendLen(b, 6, list)
	}
	return b
}

func sliceValues(v attribute.Value) []attribute.Value {
	var out []attribute.Value
	switch v.Type() {
	case attribute.BOOLSLICE:
		for _, e := range v.AsBoolSlice() {
			out = append(out, attribute.BoolValue(e))
		}
	case attribute.INT64SLICE:
		for _, e := range v.AsInt64Slice() {
			out = append(out, attribute.Int64Value(e))
		}
	case attribute.FLOAT64SLICE:
		for _, e := range v.AsFloat64Slice() {
			out = append(out, attribute.Float64Value(e))
		}
	case attribute.STRINGSLICE:
		for _, e := range v.AsStringSlice() {
			out = append(out, attribute.StringValue(e))
		}
	case attribute.SLICE:
		out = v.AsSlice()
	}
	return out
}
