package api

import (
	"fmt"
	"mime"
	"net/http"
	"strings"

	"github.com/aileron-dev/aileron-proxy/internal/contract"
)

// CodeUnsupportedMediaType answers a JSON route called with a body that is
// not declared as JSON.
const CodeUnsupportedMediaType = contract.CodeUnsupportedMediaType

// checkJSONContentType refuses, with 415, a request body whose Content-Type
// is not application/json (an optional charset must be utf-8). Every route
// that reads a JSON body calls it through decodeJSON, so a body sent as
// text/plain or without a Content-Type is never run. The shims send
// application/json (BusyBox wget too, with --header), so none needs an
// exception.
func checkJSONContentType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	const fix = "; send the body with Content-Type: application/json"
	if ct == "" {
		return apiErr(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "the request has a body but no Content-Type"+fix)
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return apiErr(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, fmt.Sprintf("Content-Type %q is not JSON%s", ct, fix))
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return apiErr(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType,
				fmt.Sprintf("Content-Type %q has a parameter the API does not take (only charset=utf-8)%s", ct, fix))
		}
	}
	return nil
}
