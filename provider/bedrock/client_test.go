package bedrock

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	smithyauth "github.com/aws/smithy-go/auth"
	"github.com/aws/smithy-go/middleware"
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
