package vertex

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/tokens"
)

// Scope is the OAuth scope of every token: Vertex AI's.
const Scope = "https://www.googleapis.com/auth/cloud-platform"

// Credential limits.
const (
	// MaxCredentialBytes bounds a credentials file.
	MaxCredentialBytes = 1 << 20
	// MaxCredentials bounds how many credentials (distinct keys) an
	// adapter keeps tokens for; past it the oldest is forgotten.
	MaxCredentials = 256
	// TokenTimeoutDefault bounds one token fetch.
	TokenTimeoutDefault = 30 * time.Second
)

// Credential types a key may hold: a service-account key, a user's
// gcloud credentials, a workload identity federation configuration, and
// an impersonated service account.
var credentialTypes = []google.CredentialsType{google.ServiceAccount, google.AuthorizedUser, google.ExternalAccount, google.ImpersonatedServiceAccount}

// ErrNoCredentials reports that Application Default Credentials found
// nothing: no key, no gcloud credentials file, no metadata server.
var ErrNoCredentials = errors.New("vertex: no Google credentials (set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, run gcloud auth application-default login, or run on Google Cloud)")

// credential is one credential's tokens and the project it names.
type credential struct {
	tokens  *tokens.Cache
	project string
}

// entry is a credential being loaded or loaded; loaded once.
type entry struct {
	once sync.Once
	c    *credential
	err  error
}

// credentials holds the adapter's credentials by key: a key (a request's
// APIKey) is a credentials JSON document, or the path of a file holding
// one; no key is Application Default Credentials.
type credentials struct {
	env    func(string) string
	ctx    context.Context // carries the token client; token fetches outlive the calls that start them
	before time.Duration
	wg     sync.WaitGroup

	mu    sync.Mutex
	byKey map[[32]byte]*entry
	order [][32]byte
}

func newCredentials(env func(string) string, client *http.Client, before time.Duration) *credentials {
	return &credentials{
		env:    env,
		ctx:    context.WithValue(context.Background(), oauth2.HTTPClient, client),
		before: before,
		byKey:  map[[32]byte]*entry{},
	}
}

// get returns the credential of key, loading it the first time.
func (cs *credentials) get(key provider.Secret) (*credential, error) {
	h := sha256.Sum256([]byte(key.Reveal()))
	cs.mu.Lock()
	e, ok := cs.byKey[h]
	if !ok {
		e = &entry{}
		cs.byKey[h] = e
		cs.order = append(cs.order, h)
		if len(cs.order) > MaxCredentials {
			delete(cs.byKey, cs.order[0])
			cs.order = cs.order[1:]
		}
	}
	cs.mu.Unlock()
	e.once.Do(func() { e.c, e.err = cs.load(key.Reveal()) })
	if e.err != nil {
		// A failed load is tried again by the next call (a file being
		// written, a metadata server starting).
		cs.mu.Lock()
		if cs.byKey[h] == e {
			delete(cs.byKey, h)
		}
		cs.mu.Unlock()
	}
	return e.c, e.err
}

// load reads a credential: key is a JSON document (it starts with "{"),
// a file path, or empty for Application Default Credentials: the file
// GOOGLE_APPLICATION_CREDENTIALS names, gcloud's
// application_default_credentials.json, then the metadata server of
// Google Cloud (where workload identity also answers).
func (cs *credentials) load(key string) (*credential, error) {
	key = strings.TrimSpace(key)
	if key == "" {
		key = strings.TrimSpace(cs.env("GOOGLE_APPLICATION_CREDENTIALS"))
	}
	if strings.HasPrefix(key, "{") {
		return cs.fromJSON([]byte(key), "the key")
	}
	if key != "" {
		data, err := readFile(key)
		if err != nil {
			return nil, err
		}
		return cs.fromJSON(data, "credentials file "+key)
	}
	if path := cs.wellKnownFile(); path != "" {
		if data, err := readFile(path); err == nil {
			return cs.fromJSON(data, "credentials file "+path)
		}
	}
	// The metadata server (Compute Engine, GKE workload identity, Cloud
	// Run): oauth2/google's own lookup, whose files were looked at above.
	c, err := google.FindDefaultCredentialsWithParams(cs.ctx, google.CredentialsParams{Scopes: []string{Scope}, EarlyTokenRefresh: cs.before})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoCredentials, err)
	}
	return &credential{tokens: tokens.New(c.TokenSource, cs.before, &cs.wg), project: c.ProjectID}, nil
}

// wellKnownFile is gcloud's application default credentials file:
// $CLOUDSDK_CONFIG/application_default_credentials.json, else under
// $HOME/.config/gcloud ("" when neither variable is set).
func (cs *credentials) wellKnownFile() string {
	const name = "application_default_credentials.json"
	if d := cs.env("CLOUDSDK_CONFIG"); d != "" {
		return filepath.Join(d, name)
	}
	if h := cs.env("HOME"); h != "" {
		return filepath.Join(h, ".config", "gcloud", name)
	}
	return ""
}

// readFile reads a credentials file of at most MaxCredentialBytes.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("vertex: credentials: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxCredentialBytes+1))
	if err != nil {
		return nil, fmt.Errorf("vertex: credentials %s: %w", path, err)
	}
	if len(data) > MaxCredentialBytes {
		return nil, fmt.Errorf("vertex: credentials %s: larger than %d bytes", path, MaxCredentialBytes)
	}
	return data, nil
}

// fromJSON loads a credentials document of one of credentialTypes; from
// names it in errors (never its content).
func (cs *credentials) fromJSON(data []byte, from string) (*credential, error) {
	if len(data) > MaxCredentialBytes {
		return nil, fmt.Errorf("vertex: %s: larger than %d bytes", from, MaxCredentialBytes)
	}
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("vertex: %s is not a credentials JSON document", from)
	}
	for _, t := range credentialTypes {
		if google.CredentialsType(head.Type) != t {
			continue
		}
		c, err := google.CredentialsFromJSONWithTypeAndParams(cs.ctx, data, t, google.CredentialsParams{Scopes: []string{Scope}})
		if err != nil {
			return nil, fmt.Errorf("vertex: %s: %w", from, err)
		}
		return &credential{tokens: tokens.New(c.TokenSource, cs.before, &cs.wg), project: c.ProjectID}, nil
	}
	return nil, fmt.Errorf("vertex: %s: credential type %q is not one of service_account, authorized_user, external_account, impersonated_service_account", from, head.Type)
}
