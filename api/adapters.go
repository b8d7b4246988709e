package api

import (
	"context"

	"github.com/aileron-dev/aileron-proxy/approval"
	"github.com/aileron-dev/aileron-proxy/proxy"
	"github.com/aileron-dev/aileron-proxy/session"
)

// The proxy depends on small interfaces rather than on the session and
// approval packages; these adapters are the one place that bridges them, so
// the daemon and the API's tests wire the proxy the same way.
var (
	_ proxy.SessionAuthenticator = ProxySessions{}
	_ proxy.Approver             = ProxyApprover{}
	_ proxy.RememberingApprover  = ProxyApprover{}
)

// ProxySessions adapts a session registry to proxy.SessionAuthenticator.
type ProxySessions struct{ Registry *session.Registry }

// AuthenticateProxy checks a proxy credential against the registry.
func (a ProxySessions) AuthenticateProxy(id, secret string) (proxy.Session, error) {
	s, err := a.Registry.AuthenticateProxy(id, secret)
	if err != nil {
		return proxy.Session{}, err
	}
	return proxy.Session{ID: s.ID, Scope: s.Scope, CA: s.CA, ExpiresAt: s.ExpiresAt, Learn: s.LearnGlobs}, nil
}

// ProxyApprover adapts an approval broker to proxy.Approver. Every outcome
// other than approved and timeout (canceled, denied) denies.
type ProxyApprover struct{ Broker *approval.Broker }

// Await holds r in the broker until it is decided, times out or ctx ends.
func (a ProxyApprover) Await(ctx context.Context, r proxy.ApprovalRequest) proxy.ApprovalOutcome {
	switch a.Broker.Await(ctx, approval.Request{
		SessionID: r.SessionID, ConnectorFQN: r.ConnectorFQN, Tool: r.Tool, Operation: r.Operation,
		Method: r.Method, Host: r.Host, Path: r.Path, Fields: r.Fields, Preview: r.Preview,
	}) {
	case approval.OutcomeApproved:
		return proxy.ApprovalApproved
	case approval.OutcomeTimeout:
		return proxy.ApprovalTimedOut
	default:
		return proxy.ApprovalDenied
	}
}

// Remembers reports whether a remembered decision answers r at once.
func (a ProxyApprover) Remembers(r proxy.ApprovalRequest) bool {
	return a.Broker.Remembers(approval.Request{SessionID: r.SessionID, ConnectorFQN: r.ConnectorFQN, Tool: r.Tool, Operation: r.Operation})
}
