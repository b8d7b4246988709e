package api

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// NewClientFor returns a client for the daemon info describes (the daemon
// uses one to call its own API).
func NewClientFor(info DaemonInfo) *Client {
	return &Client{
		info: &info,
		base: strings.TrimSuffix(info.APIURL, "/"),
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}},
		path: "(in process)",
	}
}

// CreateSandbox calls POST /v1/sandboxes. Building the image may take
// minutes: only ctx bounds the call.
func (c *Client) CreateSandbox(ctx context.Context, req CreateSandboxRequest) (*CreatedSandbox, error) {
	long := *c
	long.http = &http.Client{Transport: c.http.Transport}
	var out CreatedSandbox
	if err := long.do(ctx, http.MethodPost, "/v1/sandboxes", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListSandboxes calls GET /v1/sandboxes.
func (c *Client) ListSandboxes(ctx context.Context) ([]SandboxInfo, error) {
	var out SandboxList
	if err := c.do(ctx, http.MethodGet, "/v1/sandboxes", nil, &out); err != nil {
		return nil, err
	}
	return out.Sandboxes, nil
}

// RemoveSandbox calls DELETE /v1/sandboxes/{id}.
func (c *Client) RemoveSandbox(ctx context.Context, id string) error {
	long := *c
	long.http = &http.Client{Transport: c.http.Transport, Timeout: 5 * time.Minute}
	return long.do(ctx, http.MethodDelete, "/v1/sandboxes/"+url.PathEscape(id), nil, nil)
}
