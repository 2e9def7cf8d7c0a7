package bedrock

import (
	"context"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/smithy-go"
	smithyauth "github.com/aws/smithy-go/auth"
	smithyendpoints "github.com/aws/smithy-go/endpoints"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// The SDK builds a ConverseStream call's middleware stack anew for every
// call and runs every step of it; a one-delta reply cost 2.3-2.5x the CPU
// and 2.9x the allocations of the same reply from Chat Completions
// (BenchmarkShortReply). The client is set up once (clientOptions) so
// that a call runs only what it needs: the steps below that do nothing
// for this adapter are taken out of the stack, the endpoint rules run
// once per region and base URL (endpointCache), and the auth options are
// built once per region (authOptions): 1.75-1.9x the CPU, 2.4x the
// allocations. What remains above Chat Completions is the SigV4 signature
// (about 13 us a call) and the SDK's operation itself: building the stack
// for each call, its schema serializer and the steps' plumbing (about
// 30 us on the calling goroutine, and the collection of its allocations).

// unusedSteps are the stack's middlewares the adapter does without, by
// step, and why:
//   - OperationInputValidation checks required fields that buildInput
//     always sets (and Bedrock checks them again: ValidationException).
//   - ClientRequestID (amz-sdk-invocation-id) ties the SDK's retry
//     attempts together; its retries are off (the run loop owns them).
//   - UserAgent builds the User-Agent for every call; ownBody sets a
//     fixed one (userAgent).
//   - RecursionDetection passes AWS Lambda's trace id; workers do not run
//     in Lambda.
//   - InterceptBeforeRetryLoop and InterceptAttempt run the client's
//     interceptors; the adapter configures none.
//   - disableHTTPS acts only with EndpointOptions.DisableHTTPS (unset).
//   - setLegacyContextSigningOptions reads signing overrides from the
//     context, which nothing sets.
//   - AddRawResponseToMetadata and RequestResponseLogger keep the raw
//     response and log it; nothing reads either (ClientLogMode is 0).
//   - Retry runs the retryer's loop, one attempt with aws.NopRetryer (the
//     run loop retries with backoff and Retry-After, runner/retry.go's
//     retryWait, and rotates auth profiles and models, runner/loop.go's
//     rotate and profileFailover, on the classified error), and applies the clock
//     skew RecordResponseTiming measures to the signing time. The adapter
//     measures and applies the skew itself (clockSkew), as the SDK does.
var unusedSteps = struct{ initialize, build, finalize, deserialize []string }{
	initialize:  []string{"OperationInputValidation"},
	build:       []string{"ClientRequestID", "UserAgent", "RecursionDetection"},
	finalize:    []string{"InterceptBeforeRetryLoop", "Retry", "InterceptAttempt", "disableHTTPS", "setLegacyContextSigningOptions"},
	deserialize: []string{"AddRawResponseToMetadata", "RecordResponseTiming", "RequestResponseLogger"},
}

// trimStack takes unusedSteps out of an operation's stack (an id the SDK
// no longer adds is skipped) and installs takeStream (swapStream).
func trimStack(s *middleware.Stack) error {
	drop(unusedSteps.initialize, s.Initialize.Get, s.Initialize.Remove)
	drop(unusedSteps.build, s.Build.Get, s.Build.Remove)
	drop(unusedSteps.finalize, s.Finalize.Get, s.Finalize.Remove)
	drop(unusedSteps.deserialize, s.Deserialize.Get, s.Deserialize.Remove)
	return swapStream(s)
}

// drop removes the middlewares ids of one step that it has.
func drop[M any](ids []string, get func(string) (M, bool), remove func(string) (M, error)) {
	for _, id := range ids {
		if _, ok := get(id); ok {
			_, _ = remove(id)
		}
	}
}

// userAgent is the User-Agent of every request, in the form the SDK's
// own middleware writes it (without its per-call feature list).
var userAgent = "aws-sdk-go-v2/" + aws.SDKVersion + " os/" + runtime.GOOS + " lang/go#" + strings.TrimPrefix(runtime.Version(), "go") +
	" md/GOOS#" + runtime.GOOS + " md/GOARCH#" + runtime.GOARCH + " api/bedrockruntime lanefleet"

// clientOptions sets up a client once for the adapter's calls: no SDK
// retries (the run loop retries and fails over itself, see unusedSteps),
// requests through
// hc with their bodies copied, the trimmed stack, cached endpoints and
// auth options, and signatures corrected by skew (nil: no correction).
func clientOptions(hc bedrockruntime.HTTPClient, skew *clockSkew) func(*bedrockruntime.Options) {
	return func(o *bedrockruntime.Options) {
		o.Retryer = aws.NopRetryer{}
		o.RetryMaxAttempts = 1
		o.ClientLogMode = 0
		o.HTTPClient = ownBody{next: hc, skew: skew}
		if skew != nil {
			o.HTTPSignerV4 = skewSigner{next: o.HTTPSignerV4, skew: skew}
		}
		o.APIOptions = append(o.APIOptions, trimStack)
		o.EndpointResolverV2 = &endpointCache{next: o.EndpointResolverV2, byKey: map[endpointKey]smithyendpoints.Endpoint{}}
		o.AuthSchemeResolver = &authOptions{byRegion: map[string][]*smithyauth.Option{}}
	}
}

// endpointKey is what a Bedrock Runtime endpoint depends on.
type endpointKey struct {
	region, endpoint string
	fips, dualStack  bool
}

// endpointCache runs the SDK's endpoint rules once per key: they gave the
// same endpoint for every call, at a dozen allocations each.
type endpointCache struct {
	next bedrockruntime.EndpointResolverV2

	mu    sync.RWMutex
	byKey map[endpointKey]smithyendpoints.Endpoint
}

// ResolveEndpoint returns the endpoint the SDK's rules give for p.
func (c *endpointCache) ResolveEndpoint(ctx context.Context, p bedrockruntime.EndpointParameters) (smithyendpoints.Endpoint, error) {
	k := endpointKey{aws.ToString(p.Region), aws.ToString(p.Endpoint), aws.ToBool(p.UseFIPS), aws.ToBool(p.UseDualStack)}
	c.mu.RLock()
	e, ok := c.byKey[k]
	c.mu.RUnlock()
	if ok {
		return e, nil
	}
	e, err := c.next.ResolveEndpoint(ctx, p)
	if err != nil {
		return e, err
	}
	c.mu.Lock()
	c.byKey[k] = e
	c.mu.Unlock()
	return e, nil
}

// authOptions gives Bedrock's auth options (SigV4 for service "bedrock"
// in the call's region, then a bearer token, then anonymous: the SDK's
// default resolver's), built once per region. The options are shared by
// calls: the SDK copies what it changes (its endpoint step writes signer
// properties only when the endpoint rules name auth schemes, which
// Bedrock Runtime's do not: TestEndpointsNameNoAuthSchemes).
type authOptions struct {
	mu       sync.Mutex
	byRegion map[string][]*smithyauth.Option
}

// ResolveAuthSchemes returns the options for p's region.
func (a *authOptions) ResolveAuthSchemes(_ context.Context, p *bedrockruntime.AuthResolverParameters) ([]*smithyauth.Option, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if opts, ok := a.byRegion[p.Region]; ok {
		return opts, nil
	}
	var props smithy.Properties
	smithyhttp.SetSigV4SigningName(&props, "bedrock")
	smithyhttp.SetSigV4SigningRegion(&props, p.Region)
	opts := []*smithyauth.Option{
		{SchemeID: smithyauth.SchemeIDSigV4, SignerProperties: props},
		{SchemeID: smithyauth.SchemeIDHTTPBearer},
		{SchemeID: smithyauth.SchemeIDAnonymous},
	}
	a.byRegion[p.Region] = opts
	return opts, nil
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

// skewSigner signs with the SDK's SigV4 signer at the server's time.
type skewSigner struct {
	next v4.HTTPSigner
	skew *clockSkew
}

// SignHTTP signs r as of signingTime moved by the skew.
func (s skewSigner) SignHTTP(ctx context.Context, creds aws.Credentials, r *http.Request, payloadHash, service, region string,
	signingTime time.Time, optFns ...func(*v4.SignerOptions)) error {
	return s.next.SignHTTP(ctx, creds, r, payloadHash, service, region, signingTime.Add(time.Duration(s.skew.ns.Load())), optFns...)
}
