package bedrock

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/schemas"
	"github.com/aws/smithy-go"
	smithyauth "github.com/aws/smithy-go/auth"
	"github.com/aws/smithy-go/auth/bearer"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/aws/smithy-go/transport/http/protocol/restjson1"

	"github.com/lanefleet/lanefleet/provider"
)

// A ConverseStream call is made of the SDK's parts, in the order and with
// the options its operation uses them (the stack of ConverseStream's
// middlewares, which the adapter does not run: see the package doc):
//   - the client's options, resolved once by bedrockruntime.NewFromConfig
//     from the AWS configuration (credentials, the AWS_BEARER_TOKEN_BEDROCK
//     token, the auth scheme preference, the base endpoint of the config
//     and AWS_ENDPOINT_URL_BEDROCK_RUNTIME, FIPS and dual-stack, the
//     endpoint rules, the SigV4 and bearer signers);
//   - the auth scheme the SDK's resolver would pick (authScheme);
//   - the endpoint of the SDK's rules for the call's parameters
//     (endpointParams, cached per parameters: endpointCache);
//   - the request serialized by the SDK's restJson1 protocol with the
//     operation's schema (method, path with the model id escaped as the
//     SDK escapes it, Content-Type, body);
//   - the payload's SHA-256 and the SigV4 signature of the client's
//     signer, at the server's time (clockSkew), or the bearer signer;
//   - for an error response, the SDK's restJson1 error deserializer
//     (apiError), which gives the exception and message classified.
// The adapter sends the request with its HTTP client (no retries: the run
// loop retries with backoff and Retry-After, runner/retry.go's retryWait,
// and rotates auth profiles and models, runner/loop.go's rotate, on the
// classified error) and reads the event stream itself (frames.go).

// converseStream is the operation's schema: its HTTP binding (POST
// /model/{modelId}/converse-stream), input and output shapes.
var converseStream = smithy.NewOperationSchema(schemas.ConverseStream, schemas.ConverseStreamRequest, schemas.ConverseStreamResponse)

// userAgent is the User-Agent of every request, in the form the SDK's
// own middleware writes it (without its per-call feature list; SigV4
// does not sign it).
var userAgent = "aws-sdk-go-v2/" + aws.SDKVersion + " os/" + runtime.GOOS + " lang/go#" + strings.TrimPrefix(runtime.Version(), "go") +
	" md/GOOS#" + runtime.GOOS + " md/GOARCH#" + runtime.GOARCH + " api/bedrockruntime lanefleet"

// Auth scheme names, as AuthSchemePreference spells them.
const (
	schemeSigV4     = "sigv4"
	schemeBearer    = "httpBearerAuth"
	schemeAnonymous = "anonymous"
)

// client holds what a call needs from the AWS configuration, resolved
// once.
type client struct {
	opts      bedrockruntime.Options // as bedrockruntime.NewFromConfig resolves them
	hc        bedrockruntime.HTTPClient
	skew      *clockSkew // nil = no correction
	proto     *restjson1.Protocol
	endpoints endpointCache
}

// newClient resolves the client options of ac, its credentials refreshed
// ahead of expiry; requests go through hc.
func newClient(ac aws.Config, hc bedrockruntime.HTTPClient) *client {
	ac.Credentials = aheadOf(ac.Credentials)
	c := &client{opts: bedrockruntime.NewFromConfig(ac).Options(), hc: hc, proto: restjson1.New(nil)}
	if !ac.DisableClockSkewCorrection {
		c.skew = &clockSkew{}
	}
	c.endpoints.byKey = map[endpointKey]endpoint{}
	return c
}

// call is one call's target and auth: its region, base endpoint, and the
// credentials or token it is signed with.
type call struct {
	region string
	base   *string
	creds  aws.CredentialsProvider
	token  bearer.TokenProvider
	prefer []string
}

// callFor returns the call of model m with key: m's own base URL (not
// AWS's endpoint: BEDROCK_BASE_URL) over the client's, the configured
// region (any, for a base URL of its own), and the key's credentials (an
// access key pair, else a Bedrock API key as a bearer token) over the
// chain's.
func (c *client) callFor(m provider.Model, key provider.Secret) (call, error) {
	cl := call{region: c.opts.Region, base: c.opts.BaseEndpoint, creds: c.opts.Credentials, token: c.opts.BearerAuthTokenProvider, prefer: c.opts.AuthSchemePreference}
	if base := m.BaseURL; base != "" && !strings.Contains(base, RegionPlaceholder) {
		cl.base = &base
		if cl.region == "" {
			// A proxy or test endpoint: any region signs.
			cl.region = "us-east-1"
		}
	}
	if cl.region == "" {
		return cl, errNoRegion
	}
	k := key.Reveal()
	switch sm := accessKey.FindStringSubmatch(k); {
	case k == "":
	case sm != nil:
		cl.creds = credentials.NewStaticCredentialsProvider(sm[1], sm[2], sm[3])
		cl.prefer = []string{schemeSigV4}
	default:
		cl.token = bearer.StaticTokenProvider{Token: bearer.Token{Value: k}}
		cl.prefer = []string{schemeBearer}
	}
	return cl, nil
}

// authScheme is the scheme the SDK's auth resolver picks for cl: of
// Bedrock's options (SigV4, a bearer token, anonymous) sorted by the
// preference, the first one it has an identity for.
func (cl call) authScheme() string {
	options := [...]string{schemeSigV4, schemeBearer, schemeAnonymous}
	sorted := make([]string, 0, len(options))
	for _, p := range cl.prefer {
		for _, o := range options {
			if o == p && !contains(sorted, o) {
				sorted = append(sorted, o)
			}
		}
	}
	for _, o := range options {
		if !contains(sorted, o) {
			sorted = append(sorted, o)
		}
	}
	for _, o := range sorted {
		switch {
		case o == schemeSigV4 && cl.creds != nil, o == schemeBearer && cl.token != nil, o == schemeAnonymous:
			return o
		}
	}
	return schemeAnonymous
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// errIdentity is a failure to get the call's credentials or token.
var errIdentity = errors.New("get identity")

// request builds cl's signed ConverseStream request for in, sent under
// ctx.
func (c *client) request(ctx context.Context, cl call, in *bedrockruntime.ConverseStreamInput) (*http.Request, error) {
	ep, err := c.endpoints.resolve(ctx, c.opts.EndpointResolverV2, cl.region, cl.base, c.opts.EndpointOptions)
	if err != nil {
		return nil, fmt.Errorf("bedrock: resolve endpoint: %w", err)
	}
	sreq := smithyhttp.NewStackRequest().(*smithyhttp.Request)
	if err := c.proto.SerializeRequest(ctx, converseStream, in, sreq); err != nil {
		return nil, fmt.Errorf("bedrock: serialize request: %w", err)
	}
	data, err := payload(sreq)
	if err != nil {
		return nil, err
	}
	r := sreq.Request.WithContext(ctx)
	// As the SDK's endpoint step: the endpoint's scheme, host and path
	// before the operation's.
	u := ep.uri
	if u.RawPath == "" && r.URL.RawPath != "" {
		u.RawPath = u.Path
	}
	r.URL.Scheme, r.URL.Host = u.Scheme, u.Host
	r.URL.Path = smithyhttp.JoinPath(u.Path, r.URL.Path)
	r.URL.RawPath = smithyhttp.JoinPath(u.RawPath, r.URL.RawPath)
	for k := range ep.headers {
		r.Header.Set(k, ep.headers.Get(k))
	}
	r.Header.Set("User-Agent", userAgent)
	r.Body = io.NopCloser(bytes.NewReader(data))
	r.ContentLength = int64(len(data))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	switch cl.authScheme() {
	case schemeSigV4:
		creds, err := cl.creds.Retrieve(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w: get credentials: %w", errIdentity, err)
		}
		sum := sha256.Sum256(data)
		region := cl.region
		if ep.signingRegion != "" {
			region = ep.signingRegion
		}
		if err := c.opts.HTTPSignerV4.SignHTTP(ctx, creds, r, hex.EncodeToString(sum[:]), ep.signingName, region, c.skew.now()); err != nil {
			return nil, fmt.Errorf("bedrock: sign request: %w", err)
		}
	case schemeBearer:
		tok, err := cl.token.RetrieveBearerToken(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w: get token: %w", errIdentity, err)
		}
		signed, err := c.opts.BearerAuthSigner.SignWithBearerToken(ctx, tok, &smithyhttp.Request{Request: r})
		if err != nil {
			return nil, fmt.Errorf("bedrock: sign request: %w", err)
		}
		sr, ok := signed.(*smithyhttp.Request)
		if !ok {
			return nil, fmt.Errorf("bedrock: sign request: a %T", signed)
		}
		r = sr.Request
	}
	return r, nil
}

// payload returns the body the SDK's serializer set on r.
func payload(r *smithyhttp.Request) ([]byte, error) {
	s := r.GetStream()
	if s == nil {
		return nil, nil
	}
	if b, ok := s.(*bytes.Reader); ok {
		data := make([]byte, b.Len())
		_, err := io.ReadFull(b, data)
		return data, err
	}
	return io.ReadAll(s)
}

// send sends r, measuring the clock skew on its response.
func (c *client) send(r *http.Request) (*http.Response, error) {
	at := time.Now()
	resp, err := c.hc.Do(r)
	if err == nil && c.skew != nil {
		c.skew.observe(resp.Header, at, time.Now())
	}
	return resp, err
}

// maxErrorBytes bounds the error response read (Bedrock's are a short
// JSON object).
const maxErrorBytes = 64 << 10

// apiError reads an error response (status outside 2xx) with the SDK's
// restJson1 error deserializer: a smithy.APIError of the exception named
// by the x-amzn-ErrorType header, else the body's __type or code, with
// its message; a smithy.DeserializationError for a body it cannot read.
// It is wrapped as the SDK wraps it (an awshttp.ResponseError with the
// request id), and resp's body is closed.
func (c *client) apiError(ctx context.Context, resp *http.Response) error {
	defer resp.Body.Close()
	limited := *resp
	limited.Body = io.NopCloser(io.LimitReader(resp.Body, maxErrorBytes))
	sresp := &smithyhttp.Response{Response: &limited}
	err := c.proto.DeserializeResponse(ctx, converseStream, bedrockruntime.TypeRegistry, sresp, &bedrockruntime.ConverseStreamOutput{})
	if err == nil {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{Response: sresp, Err: err}, RequestID: resp.Header.Get("X-Amzn-Requestid")}
}

// endpointKey is what a Bedrock Runtime endpoint depends on.
type endpointKey struct {
	region, base    string
	fips, dualStack bool
}

// endpoint is a resolved endpoint and the SigV4 name and region it is
// signed with.
type endpoint struct {
	uri                        url.URL
	headers                    http.Header
	signingName, signingRegion string // the name is "bedrock"; region "" = the call's
}

// endpointCache runs the SDK's endpoint rules once per key: they give the
// same endpoint for every call, at a dozen allocations each.
type endpointCache struct {
	mu    sync.RWMutex
	byKey map[endpointKey]endpoint
}

// resolve returns the endpoint of the SDK's rules (rules) for a call to
// region at base (nil: AWS's) with the client's FIPS and dual-stack
// options, with the parameters the SDK's operation and endpoint step
// bind.
func (c *endpointCache) resolve(ctx context.Context, rules bedrockruntime.EndpointResolverV2, region string, base *string,
	eo bedrockruntime.EndpointResolverOptions) (endpoint, error) {
	// A FIPS region name ("fips-us-east-1") asks for FIPS, as the SDK's
	// finalizeClientEndpointResolverOptions has it for every operation.
	fips := eo.UseFIPSEndpoint == aws.FIPSEndpointStateEnabled || eo.ResolvedRegion == "" && mapFIPSRegion(region) != region
	k := endpointKey{region: region, base: aws.ToString(base), fips: fips, dualStack: eo.UseDualStackEndpoint == aws.DualStackEndpointStateEnabled}
	c.mu.RLock()
	e, ok := c.byKey[k]
	c.mu.RUnlock()
	if ok {
		return e, nil
	}
	p, err := endpointParams(region, base, k.fips, k.dualStack)
	if err != nil {
		return e, err
	}
	se, err := rules.ResolveEndpoint(ctx, p)
	if err != nil {
		return e, err
	}
	e = endpoint{uri: se.URI, headers: se.Headers, signingName: "bedrock"}
	opts, _ := smithyauth.GetAuthOptions(&se.Properties)
	for _, o := range opts {
		if n, ok := smithyhttp.GetSigV4SigningName(&o.SignerProperties); ok {
			e.signingName = n
		}
		if r, ok := smithyhttp.GetSigV4SigningRegion(&o.SignerProperties); ok {
			e.signingRegion = r
		}
	}
	c.mu.Lock()
	c.byKey[k] = e
	c.mu.Unlock()
	return e, nil
}

// endpointParams are the endpoint rules' parameters of a call, as the
// SDK's bindEndpointParams sets them: the region checked as a host name
// and with its FIPS spelling taken out, FIPS and dual-stack, the base
// endpoint.
func endpointParams(region string, base *string, fips, dualStack bool) (bedrockruntime.EndpointParameters, error) {
	p := bedrockruntime.EndpointParameters{UseFIPS: aws.Bool(fips), UseDualStack: aws.Bool(dualStack), Endpoint: base}
	if region != "" {
		if !validHostName(region) {
			return p, fmt.Errorf("invalid input region %s", region)
		}
		p.Region = aws.String(mapFIPSRegion(region))
	}
	return p, nil
}

// validHostName reports whether s is a host name of valid labels (the
// SDK's rulesfn.IsValidHostLabel with sub-domains).
func validHostName(s string) bool {
	for _, label := range strings.Split(s, ".") {
		if !smithyhttp.ValidHostLabel(label) || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
	}
	return true
}

// mapFIPSRegion takes "fips" out of a region's name (the SDK's
// endpoints.MapFIPSRegion: "fips-us-east-1" is "us-east-1").
func mapFIPSRegion(region string) string {
	if strings.Contains(region, "-fips-") || strings.Contains(region, "fips-") || strings.Contains(region, "-fips") {
		region = strings.ReplaceAll(region, "-fips-", "-")
		region = strings.ReplaceAll(region, "fips-", "")
		region = strings.ReplaceAll(region, "-fips", "")
	}
	return region
}

// maxTrustedRoundTrip bounds the round trip whose response's Date header
// is trusted for the clock skew (the SDK's bound).
const maxTrustedRoundTrip = 15 * time.Minute

// clockSkew is how far the server's clock runs ahead of this host's, as
// its last response's Date header said (the SDK's clock skew correction,
// which its Retry step did: a host whose clock is minutes off fails one
// call with a signature out of date, and the following calls sign with
// the server's time).
type clockSkew struct{ ns atomic.Int64 }

// observe records the skew a response received at responseAt for a
// request sent at requestAt shows: none without a Date, from a cache
// (Age), or after too long a round trip.
func (c *clockSkew) observe(h http.Header, requestAt, responseAt time.Time) {
	d := h.Get("Date")
	if d == "" || h.Get("Age") != "" || responseAt.Sub(requestAt) > maxTrustedRoundTrip {
		return
	}
	server, err := http.ParseTime(d)
	if err != nil {
		return
	}
	c.ns.Store(int64(server.Sub(responseAt)))
}

// now is the time to sign at: this host's moved by the skew (nil: not).
func (c *clockSkew) now() time.Time {
	if c == nil {
		return time.Now()
	}
	return time.Now().Add(time.Duration(c.ns.Load()))
}
