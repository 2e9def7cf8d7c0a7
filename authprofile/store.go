package authprofile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/lanefleet/lanefleet/provider"
)

// CredentialType is the kind of a stored credential.
type CredentialType string

// Credential types.
const (
	TypeAPIKey CredentialType = "api_key"
	TypeToken  CredentialType = "token"
	TypeOAuth  CredentialType = "oauth"
)

// typeRank orders credential types for round robin: oauth, token, api_key.
func typeRank(t CredentialType) int {
	switch t {
	case TypeOAuth:
		return 0
	case TypeToken:
		return 1
	case TypeAPIKey:
		return 2
	}
	return 3
}

// Profile is one stored credential. Secrets are provider.Secret, so they
// never print or marshal; a Profile is configuration, not state.
type Profile struct {
	ID       string
	Type     CredentialType
	Provider string
	Email    string

	Key    provider.Secret // api_key
	KeyRef string          // api_key: reference to a secret held elsewhere

	Token    provider.Secret // token
	TokenRef string          // token

	Access     provider.Secret // oauth
	Refresh    provider.Secret // oauth
	RefreshRef string          // oauth: reference to the refresh token held elsewhere
	ClientID   string          // oauth

	// Expires is when a token or an OAuth access token expires, in Unix
	// milliseconds; 0 = never.
	Expires int64
}

// Store is the reference's auth-profiles.json: the credentials, per-provider
// explicit orders, the last good profile per provider and each profile's
// usage state. The fleet builds one from its configuration and its KV bucket.
type Store struct {
	Version  int
	Profiles []Profile           // in file order, which breaks round-robin ties
	Order    map[string][]string // provider → profile ids
	LastGood map[string]string   // provider → profile id
	Usage    map[string]State    // profile id → state
}

// Profile returns the profile with the given id.
func (s *Store) Profile(id string) (Profile, bool) {
	for _, p := range s.Profiles {
		if p.ID == id {
			return p, true
		}
	}
	return Profile{}, false
}

// ErrInvalidStore is wrapped by DecodeStore for input that is not a JSON
// object of the expected shape.
var ErrInvalidStore = errors.New("invalid auth profile store")

// DecodeStore parses an auth-profiles.json document. It accepts "mode" as an
// alias of "type" and "apiKey" as an alias of "key", drops credentials of an
// unknown type or without a provider, and reads usage numbers leniently
// (non-numbers and non-positive or non-finite times are ignored).
func DecodeStore(data []byte) (*Store, error) {
	var raw struct {
		Version    any                        `json:"version"`
		Profiles   json.RawMessage            `json:"profiles"`
		Order      map[string]json.RawMessage `json:"order"`
		LastGood   map[string]any             `json:"lastGood"`
		UsageStats map[string]json.RawMessage `json:"usageStats"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("authprofile: decode store: %w: %w", ErrInvalidStore, err)
	}
	s := &Store{Version: 1}
	if n, ok := num(raw.Version); ok {
		s.Version = int(n)
	}
	ids, objs, err := orderedObject(raw.Profiles)
	if err != nil {
		return nil, fmt.Errorf("authprofile: decode store: profiles: %w: %w", ErrInvalidStore, err)
	}
	for i, id := range ids {
		if p, ok := decodeProfile(id, objs[i]); ok {
			s.Profiles = append(s.Profiles, p)
		}
	}
	for prov, v := range raw.Order {
		var list []any
		if json.Unmarshal(v, &list) != nil {
			continue
		}
		if s.Order == nil {
			s.Order = map[string][]string{}
		}
		ids := []string{}
		for _, e := range list {
			if id, ok := e.(string); ok {
				ids = append(ids, id)
			}
		}
		s.Order[prov] = ids
	}
	for prov, v := range raw.LastGood {
		if id, ok := v.(string); ok {
			if s.LastGood == nil {
				s.LastGood = map[string]string{}
			}
			s.LastGood[prov] = id
		}
	}
	for id, v := range raw.UsageStats {
		var st State
		if st.UnmarshalJSON(v) != nil {
			continue
		}
		if s.Usage == nil {
			s.Usage = map[string]State{}
		}
		s.Usage[id] = st
	}
	return s, nil
}

// decodeProfile reads one credential object; ok is false for entries the
// reference drops.
func decodeProfile(id string, m map[string]any) (Profile, bool) {
	str := func(k string) string { s, _ := m[k].(string); return s }
	t := str("type")
	if t == "" {
		t = str("mode")
	}
	p := Profile{
		ID:       id,
		Type:     CredentialType(t),
		Provider: str("provider"),
		Email:    str("email"),
		KeyRef:   refString(m["keyRef"]),
		TokenRef: refString(m["tokenRef"]),
		ClientID: str("clientId"),
	}
	if p.Type == TypeOAuth {
		p.RefreshRef = refString(m["refreshRef"])
	}
	switch p.Type {
	case TypeAPIKey:
		k := str("key")
		if k == "" {
			k = str("apiKey")
		}
		p.Key = provider.Secret(k)
	case TypeToken:
		p.Token = provider.Secret(str("token"))
	case TypeOAuth:
		p.Access = provider.Secret(str("access"))
		p.Refresh = provider.Secret(str("refresh"))
	default:
		return Profile{}, false
	}
	if n, ok := num(m["expires"]); ok {
		p.Expires = n
	}
	if strings.TrimSpace(p.Provider) == "" {
		return Profile{}, false
	}
	return p, true
}

// refString renders a secret reference (a string or an object) as text.
func refString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return ""
	default:
		data, _ := json.Marshal(x)
		return string(data)
	}
}

// num converts a JSON number to int64 milliseconds (floored); ok is false for
// non-numbers and non-finite values.
func num(v any) (int64, bool) {
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case json.Number:
		var err error
		if f, err = x.Float64(); err != nil {
			return 0, false
		}
	default:
		return 0, false
	}
	if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > 1<<62 {
		return 0, false
	}
	return int64(math.Floor(f)), true
}

// orderedObject decodes a JSON object of objects keeping its key order.
// Values that are not objects are skipped; a null or absent object is empty.
func orderedObject(data json.RawMessage) ([]string, []map[string]any, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || string(data) == "null" {
		return nil, nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, nil, fmt.Errorf("want an object")
	}
	var keys []string
	var vals []map[string]any
	seen := map[string]int{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		key, _ := kt.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		m, ok := v.(map[string]any)
		if !ok {
			continue
		}
		if i, dup := seen[key]; dup { // a later duplicate key wins, in place
			vals[i] = m
			continue
		}
		seen[key] = len(keys)
		keys = append(keys, key)
		vals = append(vals, m)
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, err
	}
	return keys, vals, nil
}
