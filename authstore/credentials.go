package authstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/catalog"
)

// EnvProfileSuffix ends the id of a profile made from an environment
// variable: ANTHROPIC_API_KEY becomes the api_key profile "anthropic:env".
const EnvProfileSuffix = ":env"

// LoadCredentials returns the credentials a worker may use: the profiles and
// explicit orders of the auth-profiles.json file at path (see
// authprofile.DecodeStore), followed by one api_key profile
// "<provider>:env" per known provider whose key variable is set in env
// (ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY or GOOGLE_API_KEY, …:
// the variables of provider/catalog, first non-empty wins, as the provider
// registry reads them). A file profile with the same id wins over the
// environment. env is the environment to read (os.Getenv in the worker);
// nil is an empty one.
//
// Path "" means environment keys only. A file that is missing, cannot be
// read or cannot be parsed is an error naming the file (and never quoting
// its content): a worker told to rotate keys must not start without them,
// nor with a profile whose keyRef, tokenRef or refreshRef ("env:NAME",
// "file:/path") names nothing readable. The file's usageStats and lastGood are dropped: that state
// lives in the bucket.
func LoadCredentials(path string, env func(string) string) (*authprofile.Store, error) {
	creds := &authprofile.Store{Version: 1}
	if path != "" {
		data, err := os.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("authstore: credentials file %s does not exist", path)
		case err != nil:
			return nil, fmt.Errorf("authstore: read credentials: %w", err)
		default:
			st, err := authprofile.DecodeStore(data)
			if err != nil {
				return nil, fmt.Errorf("authstore: credentials file %s: %w", path, err)
			}
			creds = st
			creds.Usage, creds.LastGood = nil, nil
			for _, p := range creds.Profiles {
				// A secret held by reference is read at each use; one
				// that cannot be read now stops the worker here.
				var err error
				switch {
				case p.Type == authprofile.TypeOAuth && (p.Refresh != "" || p.RefreshRef != ""):
					_, err = p.RefreshSecret(env)
				case p.Key == "" && p.Token == "" && p.Access == "":
					_, err = p.Secret(env)
				}
				if err != nil {
					return nil, fmt.Errorf("authstore: credentials file %s: %w", path, err)
				}
			}
		}
	}
	if env == nil {
		return creds, nil
	}
	for _, p := range catalog.Providers() {
		id := p.Name + EnvProfileSuffix
		if _, exists := creds.Profile(id); exists {
			continue
		}
		for _, name := range p.KeyEnv {
			if v := strings.TrimSpace(env(name)); v != "" {
				creds.Profiles = append(creds.Profiles, authprofile.Profile{
					ID: id, Type: authprofile.TypeAPIKey, Provider: p.Name, Key: provider.Secret(v),
				})
				break
			}
		}
	}
	return creds, nil
}
