package host

import (
	_ "embed"
	"net/http"
	"strconv"
)

// openAPIDocument is the OpenAPI 3.1 description of the management API (JSON), the one
// copy in the repository: GET /v1/openapi.json serves it as it is, and
// TestOpenAPIDescribesEveryRoute checks it against the routes, the Go types of the
// replies and real requests to a node (docs/api.md says how to add a route).
//
//go:embed openapi.json
var openAPIDocument []byte

// openAPIRoutes serves the description. It is open, like the probes: it holds nothing
// about the cluster (it is the repository's file), and tools that generate clients or
// configure gateways fetch it before they hold a token. With APIConfig.AuthAll it needs
// read, as the probes do.
func (n *Node) openAPIRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(openAPIDocument)))
		w.WriteHeader(http.StatusOK)
		w.Write(openAPIDocument)
	})
}
