package gateway

import (
	_ "embed"
	"encoding/base64"
	"net/http"
)

// openAPIDoc describes the native API; TestOpenAPIMatchesRoutes keeps it
// and the route table in step.
//
//go:embed openapi.json
var openAPIDoc []byte

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=300")
	_, _ = w.Write(openAPIDoc)
}

// decodeBase64 decodes an image's data as the wire carries it.
func decodeBase64(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }
