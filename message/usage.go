package message

import (
	"encoding/json"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Cost is the USD cost of a call, split like Usage.
type Cost struct {
	Input      float64 `json:"input" msgpack:"input"`
	Output     float64 `json:"output" msgpack:"output"`
	CacheRead  float64 `json:"cacheRead" msgpack:"cacheRead"`
	CacheWrite float64 `json:"cacheWrite" msgpack:"cacheWrite"`
	Total      float64 `json:"total" msgpack:"total"`
}

// Usage is the token accounting of one assistant message. Input counts
// non-cached prompt tokens. TotalTokens is optional in old session files.
type Usage struct {
	Input       int64
	Output      int64
	CacheRead   int64
	CacheWrite  int64
	TotalTokens int64
	Cost        Cost
	// Extra holds unknown fields, encoded back unchanged.
	Extra map[string]any
}

// IsZero reports whether u carries no counts and no cost.
func (u Usage) IsZero() bool {
	return u.Input == 0 && u.Output == 0 && u.CacheRead == 0 && u.CacheWrite == 0 &&
		u.TotalTokens == 0 && u.Cost == (Cost{}) && len(u.Extra) == 0
}

// Total returns TotalTokens, or the sum of the parts when it is zero.
func (u Usage) Total() int64 {
	if u.TotalTokens > 0 {
		return u.TotalTokens
	}
	return u.Input + u.Output + u.CacheRead + u.CacheWrite
}

// Add returns the field-wise sum of u and v (Extra of u kept).
func (u Usage) Add(v Usage) Usage {
	u.Input += v.Input
	u.Output += v.Output
	u.CacheRead += v.CacheRead
	u.CacheWrite += v.CacheWrite
	u.TotalTokens += v.TotalTokens
	u.Cost.Input += v.Cost.Input
	u.Cost.Output += v.Cost.Output
	u.Cost.CacheRead += v.Cost.CacheRead
	u.Cost.CacheWrite += v.Cost.CacheWrite
	u.Cost.Total += v.Cost.Total
	return u
}

func (u Usage) toObj() obj {
	m := obj{
		"input": u.Input, "output": u.Output, "cacheRead": u.CacheRead, "cacheWrite": u.CacheWrite,
		"cost": obj{
			"input": u.Cost.Input, "output": u.Cost.Output, "cacheRead": u.Cost.CacheRead,
			"cacheWrite": u.Cost.CacheWrite, "total": u.Cost.Total,
		},
	}
	if u.TotalTokens != 0 {
		// Old session files lack totalTokens; absent and zero mean the same.
		m["totalTokens"] = u.TotalTokens
	}
	putExtra(m, u.Extra)
	return m
}

func usageFromObj(m obj, path string) (Usage, error) {
	r := &reader{m: m, path: path}
	u := Usage{
		Input: r.int("input"), Output: r.int("output"), CacheRead: r.int("cacheRead"),
		CacheWrite: r.int("cacheWrite"), TotalTokens: r.int("totalTokens"),
	}
	if c, ok := r.object("cost"); ok {
		cr := &reader{m: c, path: path + ".cost"}
		u.Cost = Cost{
			Input: cr.float("input"), Output: cr.float("output"), CacheRead: cr.float("cacheRead"),
			CacheWrite: cr.float("cacheWrite"), Total: cr.float("total"),
		}
		if cr.err != nil {
			return Usage{}, cr.err
		}
		if rest := cr.rest(); rest != nil {
			// Unknown cost fields are rare; keep them under the cost key.
			full := obj{"cost": rest}
			u.Extra = full
		}
	}
	if r.err != nil {
		return Usage{}, r.err
	}
	if rest := r.rest(); rest != nil {
		if u.Extra == nil {
			u.Extra = rest
		} else {
			for k, v := range rest {
				u.Extra[k] = v
			}
		}
	}
	return u, nil
}

// MarshalJSON encodes the usage with pi field names.
func (u Usage) MarshalJSON() ([]byte, error) {
	return json.Marshal(u.usageObj())
}

// UnmarshalJSON decodes usage, keeping unknown fields.
func (u *Usage) UnmarshalJSON(data []byte) error {
	m, err := decodeJSONObject(data)
	if err != nil {
		return fmt.Errorf("message: usage: %w", err)
	}
	v, err := usageFromObj(m, "usage")
	if err != nil {
		return err
	}
	*u = v
	return nil
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (u Usage) EncodeMsgpack(enc *msgpack.Encoder) error { return encodeMsgpackObj(enc, u.usageObj()) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (u *Usage) DecodeMsgpack(dec *msgpack.Decoder) error {
	m, err := decodeMsgpackObj(dec)
	if err != nil {
		return fmt.Errorf("message: usage: %w", err)
	}
	v, err := usageFromObj(m, "usage")
	if err != nil {
		return err
	}
	*u = v
	return nil
}

// usageObj is toObj with unknown cost fields folded back into cost.
func (u Usage) usageObj() obj {
	m := u.toObj()
	if c, ok := u.Extra["cost"].(obj); ok {
		putExtra(m["cost"].(obj), c)
	}
	return m
}
