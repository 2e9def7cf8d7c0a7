package agents

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Encode validates a definition and returns its msgpack record.
func Encode(a *Agent) ([]byte, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	b, err := msgpack.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("agents: encode %s: %w", a.ID, err)
	}
	if len(b) > MaxRecordBytes {
		return nil, fmt.Errorf("%w: record of %d bytes, the limit is %d", ErrInvalid, len(b), MaxRecordBytes)
	}
	return b, nil
}

// Decode reads a msgpack record, refusing one larger than MaxRecordBytes,
// one that does not decode and one whose definition breaks a rule. Its
// errors wrap ErrInvalid.
func Decode(b []byte) (*Agent, error) {
	if len(b) > MaxRecordBytes {
		return nil, fmt.Errorf("%w: record of %d bytes, the limit is %d", ErrInvalid, len(b), MaxRecordBytes)
	}
	var a Agent
	dec := msgpack.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields(true)
	if err := dec.Decode(&a); err != nil {
		return nil, fmt.Errorf("%w: record does not decode: %w", ErrInvalid, err)
	}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return &a, nil
}

// ParseJSON reads a definition people wrote: one JSON object with the
// fields of Agent (camelCase), unknown fields refused, at most
// MaxRecordBytes. Its errors wrap ErrInvalid.
func ParseJSON(b []byte) (*Agent, error) {
	if len(b) > MaxRecordBytes {
		return nil, fmt.Errorf("%w: %d bytes of JSON, the limit is %d", ErrInvalid, len(b), MaxRecordBytes)
	}
	var a Agent
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return nil, fmt.Errorf("%w: JSON: %w", ErrInvalid, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: JSON: more than one value", ErrInvalid)
	}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return &a, nil
}
