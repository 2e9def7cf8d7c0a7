package authprofile

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// DecodeConfig parses the reference's "auth" configuration object
// ({"profiles": {id: {provider, mode}}, "order": {provider: [ids]},
// "cooldowns": {...}}), keeping the order of the profiles. The fleet policy
// is left zero. null decodes to the zero Config.
func DecodeConfig(data []byte) (Config, error) {
	var raw struct {
		Profiles  json.RawMessage     `json:"profiles"`
		Order     map[string][]string `json:"order"`
		Cooldowns struct {
			BillingBackoffHours           float64            `json:"billingBackoffHours"`
			BillingBackoffHoursByProvider map[string]float64 `json:"billingBackoffHoursByProvider"`
			BillingMaxHours               float64            `json:"billingMaxHours"`
			FailureWindowHours            float64            `json:"failureWindowHours"`
		} `json:"cooldowns"`
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return Config{}, nil
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return Config{}, fmt.Errorf("authprofile: decode config: %w", err)
	}
	ids, objs, err := orderedObject(raw.Profiles)
	if err != nil {
		return Config{}, fmt.Errorf("authprofile: decode config: profiles: %w", err)
	}
	c := Config{Order: raw.Order}
	for i, id := range ids {
		prov, _ := objs[i]["provider"].(string)
		mode, _ := objs[i]["mode"].(string)
		c.Profiles = append(c.Profiles, ProfileConfig{ID: id, Provider: prov, Mode: CredentialType(mode)})
	}
	c.Cooldowns = Cooldowns(raw.Cooldowns)
	return c, nil
}
