package tracing

// ValueType is the type an attribute's value holds.
type ValueType int

// Value types.
const (
	TypeString ValueType = iota
	TypeBool
	TypeInt64
	TypeFloat64
	TypeSlice // a homogeneous array: Slice holds the elements
)

// Value is an attribute's value.
type Value struct {
	Type  ValueType
	Str   string
	Bool  bool
	Int   int64
	Float float64
	Slice []Value
}

// KeyValue is one attribute.
type KeyValue struct {
	Key   string
	Value Value
}

// String is a string attribute.
func String(k, v string) KeyValue { return KeyValue{k, Value{Type: TypeString, Str: v}} }

// Bool is a boolean attribute.
func Bool(k string, v bool) KeyValue { return KeyValue{k, Value{Type: TypeBool, Bool: v}} }

// Int is an integer attribute.
func Int(k string, v int) KeyValue { return Int64(k, int64(v)) }

// Int64 is an integer attribute.
func Int64(k string, v int64) KeyValue { return KeyValue{k, Value{Type: TypeInt64, Int: v}} }

// Float64 is a floating-point attribute.
func Float64(k string, v float64) KeyValue { return KeyValue{k, Value{Type: TypeFloat64, Float: v}} }

// StringSlice is an array of strings.
func StringSlice(k string, v []string) KeyValue {
	return slice(k, v, func(s string) Value { return String("", s).Value })
}

// BoolSlice is an array of booleans.
func BoolSlice(k string, v []bool) KeyValue {
	return slice(k, v, func(b bool) Value { return Bool("", b).Value })
}

// Int64Slice is an array of integers.
func Int64Slice(k string, v []int64) KeyValue {
	return slice(k, v, func(n int64) Value { return Int64("", n).Value })
}

// Float64Slice is an array of floating-point numbers.
func Float64Slice(k string, v []float64) KeyValue {
	return slice(k, v, func(f float64) Value { return Float64("", f).Value })
}

func slice[T any](k string, v []T, conv func(T) Value) KeyValue {
	out := make([]Value, len(v))
	for i, e := range v {
		out[i] = conv(e)
	}
	return KeyValue{k, Value{Type: TypeSlice, Slice: out}}
}
