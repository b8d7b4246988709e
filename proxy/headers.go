package proxy

// Header names and values only the proxy uses; those shared with the
// control API are in internal/contract.
const (
	headerProxyAuthorize  = "Proxy-Authorization"
	headerProxyAuthentic  = "Proxy-Authenticate"
	proxyAuthRealm        = `Basic realm="aileron-proxy"`
	contentTypeJSON       = "application/json"
	connectEstablishedMsg = "HTTP/1.1 200 Connection established\r\n\r\n"
)
