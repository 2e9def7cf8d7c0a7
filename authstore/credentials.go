package authstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/catalog"
	"github.com/lanefleet/lanefleet/secretexec"
)

// EnvProfileSuffix ends the id of a profile made from an environment
// variable: ANTHROPIC_API_KEY becomes the api_key profile "anthropic:env".
const EnvProfileSuffix = ":env"

// CredentialsConfig says where a worker's credentials come from.
type CredentialsConfig struct {
	// Path is the auth-profiles.json file; "" means environment keys only.
	Path string
	// Env is the environment to read (os.Getenv in the worker); nil is
	// an empty one.
	Env func(string) string
	// SecretExec lets the exec secret providers the file declares run
	// (the worker's --secret-exec). Without it a profile with an exec
	// reference stops the worker at start, saying so.
	SecretExec bool
}

// LoadCredentials returns the credentials a worker may use: the profiles and
// explicit orders of the auth-profiles.json file at cfg.Path (see
// authprofile.DecodeStore), followed by one api_key profile
// "<provider>:env" per known provider whose key variable is set in cfg.Env
// (ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY or GOOGLE_API_KEY, …:
// the variables of provider/catalog, first non-empty wins, as the provider
// registry reads them). A file profile with the same id wins over the
// environment.
//
// The profiles' exec references (exec:PROVIDER:ID) name providers the
// same file declares under "secrets": {"providers": …} (package
// secretexec); with cfg.SecretExec they run now, once each, and exec holds
// their values (nil when no profile references one): Run it to refresh
// them. A reference to an undeclared provider, any exec reference without
// cfg.SecretExec, and a provider that fails stop the worker here. Nothing
// but that file declares a provider: a profile anywhere else could only
// name one.
//
// A file that is missing, cannot be read or cannot be parsed is an error
// naming the file (and never quoting its content): a worker told to rotate
// keys must not start without them, nor with a profile whose keyRef,
// tokenRef or refreshRef ("env:NAME", "file:/path", "exec:PROVIDER:ID")
// names nothing readable. The file's usageStats and lastGood are dropped:
// that state lives in the bucket.
func LoadCredentials(ctx context.Context, cfg CredentialsConfig) (creds *authprofile.Store, exec *secretexec.Values, err error) {
	creds = &authprofile.Store{Version: 1}
	env, path := cfg.Env, cfg.Path
	if path != "" {
		data, err := os.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, nil, fmt.Errorf("authstore: credentials file %s does not exist", path)
		case err != nil:
			return nil, nil, fmt.Errorf("authstore: read credentials: %w", err)
		}
		st, err := authprofile.DecodeStore(data)
		if err != nil {
			return nil, nil, fmt.Errorf("authstore: credentials file %s: %w", path, err)
		}
		creds = st
		creds.Usage, creds.LastGood = nil, nil
		if exec, err = startExec(ctx, cfg, data, st); err != nil {
			return nil, nil, fmt.Errorf("authstore: credentials file %s: %w", path, err)
		}
		src := authprofile.SecretSources{Env: env}
		if exec != nil {
			src.Exec = exec.Secret
		}
		for _, p := range creds.Profiles {
			// A secret held by reference is read at each use (an exec
			// one from memory); one that cannot be read now stops the
			// worker here.
			var err error
			switch {
			case p.Type == authprofile.TypeOAuth && (p.Refresh != "" || p.RefreshRef != ""):
				_, err = p.RefreshSecret(src)
			case p.Key == "" && p.Token == "" && p.Access == "":
				_, err = p.Secret(src)
			}
			if err != nil {
				return nil, nil, fmt.Errorf("authstore: credentials file %s: %w", path, err)
			}
		}
	}
	if env == nil {
		return creds, exec, nil
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
	return creds, exec, nil
}

// startExec runs the exec secret providers the profiles of the file data
// (decoded as st) reference (nil when none does).
func startExec(ctx context.Context, cfg CredentialsConfig, data []byte, st *authprofile.Store) (*secretexec.Values, error) {
	declared, err := secretexec.Decode(data)
	if err != nil {
		return nil, err
	}
	want := map[string][]string{}
	for _, p := range st.Profiles {
		for _, ref := range p.Refs() {
			r, err := authprofile.ParseSecretRef(ref)
			if err != nil || r.Source != authprofile.RefExec {
				continue // the check of each profile's secret says what is wrong
			}
			switch _, ok := declared[r.Provider]; {
			case !cfg.SecretExec:
				return nil, fmt.Errorf("auth profile %q: %w %s: %w: start the worker with --secret-exec to run the commands this file declares under \"secrets\": {\"providers\": …}", p.ID, authprofile.ErrSecretRef, r, authprofile.ErrExecOff)
			case !ok:
				return nil, fmt.Errorf("auth profile %q: %w %s: no secret provider %q is declared under \"secrets\": {\"providers\": …} in this file", p.ID, authprofile.ErrSecretRef, r, r.Provider)
			}
			want[r.Provider] = append(want[r.Provider], r.Name)
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	v, err := secretexec.New(declared, want, cfg.Env)
	if err != nil {
		return nil, err
	}
	if err := v.Load(ctx); err != nil {
		return nil, err
	}
	return v, nil
}
