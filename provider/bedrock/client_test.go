package bedrock

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	smithyauth "github.com/aws/smithy-go/auth"
	"github.com/aws/smithy-go/middleware"

	"github.com/lanefleet/lanefleet/internal/bedrocktest"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// TestStackTrimmed: a ConverseStream call runs only the steps the adapter
// needs (request, endpoint, auth, signing, error responses) and its own
// stream reader in place of the SDK's.
func TestStackTrimmed(t *testing.T) {
	var got []string
	client := bedrockruntime.New(bedrockruntime.Options{Region: "us-west-2"}, clientOptions(nil, &clockSkew{}), func(o *bedrockruntime.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			for _, ids := range [][]string{s.Initialize.List(), s.Serialize.List(), s.Build.List(), s.Finalize.List(), s.Deserialize.List()} {
				got = append(got, strings.Join(ids, " "))
			}
			return errStop
		})
	})
	_, _ = client.ConverseStream(t.Context(), &bedrockruntime.ConverseStreamInput{ModelId: aws.String("m")})
	want := []string{"", "setOperationInput ResolveEndpoint OperationSerializer", "",
		"ResolveAuthScheme GetIdentity ResolveEndpointV2 ComputePayloadHash Signing",
		"OperationEventStreamDeserializer ResponseErrorWrapper RequestIDRetriever OperationDeserializer"}
	if strings.Join(got, " | ") != strings.Join(want, " | ") {
		t.Errorf("stack\n got %q\nwant %q", got, want)
	}
}

// errStop ends a call once its stack is listed.
var errStop = context.Canceled

// TestEndpointsNameNoAuthSchemes: Bedrock Runtime's endpoint rules name
// no auth schemes, so the SDK never writes into the signer properties
// authOptions shares between calls (an SDK update that adds them fails
// here).
func TestEndpointsNameNoAuthSchemes(t *testing.T) {
	r := bedrockruntime.NewDefaultEndpointResolverV2()
	for _, p := range []bedrockruntime.EndpointParameters{
		{Region: aws.String("us-east-1"), UseFIPS: aws.Bool(false), UseDualStack: aws.Bool(false)},
		{Region: aws.String("us-gov-west-1"), UseFIPS: aws.Bool(true), UseDualStack: aws.Bool(false)},
		{Region: aws.String("eu-west-1"), UseFIPS: aws.Bool(false), UseDualStack: aws.Bool(true)},
		{Region: aws.String("us-west-2"), UseFIPS: aws.Bool(false), UseDualStack: aws.Bool(false), Endpoint: aws.String("http://127.0.0.1:1")},
	} {
		e, err := r.ResolveEndpoint(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		if opts, ok := smithyauth.GetAuthOptions(&e.Properties); ok || len(opts) > 0 {
			t.Errorf("%s: auth options %v", *p.Region, opts)
		}
	}
}

// TestConcurrentCalls: calls at once on one client, with the chain's key
// and a profile's, share its cached endpoint, auth options and clock skew
// safely (run with -race), every request signed as its call says.
func TestConcurrentCalls(t *testing.T) {
	const akidA, akidB = "AKIAIOSFODNN7EXAMPLE", "AKIAI44QH8DHBEXAMPLE"
	const secA, secB = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY"
	srv := bedrocktest.New(t, map[string]string{akidA: secA, akidB: secB}, func(int, bedrocktest.Seen) bedrocktest.Reply {
		return bedrocktest.NewFrames().Start().Text(0, "ok").Stop("end_turn", map[string]any{"inputTokens": 2, "outputTokens": 1, "totalTokens": 3})
	})
	a := New(Config{Load: func(context.Context) (aws.Config, error) {
		return aws.Config{Region: "us-west-2", Credentials: aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(akidA, secA, ""))}, nil
	}})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &provider.Request{Model: provider.Model{ID: "amazon.nova-lite-v1:0", API: "bedrock-converse-stream", BaseURL: srv.URL},
				Messages: []message.Message{message.User("hi", 1)}}
			if i%2 == 1 {
				req.APIKey = provider.Secret(akidB + ":" + secB)
			}
			if _, err := a.Stream(t.Context(), req, func(provider.Event) {}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	n := map[string]int{}
	for _, r := range srv.Requests(t) {
		n[r.Signer]++
	}
	if n[akidA] != 8 || n[akidB] != 8 {
		t.Errorf("signers %v", n)
	}
}
