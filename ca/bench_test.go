package ca

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkLeafIssue measures one uncached leaf: key generation, signing
// and parsing (the target is at most 150µs).
func BenchmarkLeafIssue(b *testing.B) {
	a := newTestAuthority(b, "api.example.com")
	h, err := normalizeHost("api.example.com")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.issue(h); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLeafCached measures Leaf for a host already issued: the cost on
// every intercepted TLS handshake.
func BenchmarkLeafCached(b *testing.B) {
	a := newTestAuthority(b, "api.example.com")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Leaf("api.example.com"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNewAuthority100Hosts measures creating a session CA for 100 hosts,
// pre-issued leaves included (the target is at most 25ms).
func BenchmarkNewAuthority100Hosts(b *testing.B) {
	hosts := make([]string, 0, 100)
	for i := range 90 {
		hosts = append(hosts, fmt.Sprintf("api%d.example.com", i))
	}
	for i := range 10 {
		hosts = append(hosts, fmt.Sprintf("10.0.0.%d", i+1))
	}
	b.ReportAllocs()
	for b.Loop() {
		a, err := New(Config{Hosts: hosts, Validity: time.Hour, PreIssue: true})
		if err != nil {
			b.Fatal(err)
		}
		if a.Stats().Issued != 100 {
			b.Fatalf("Issued = %d, want 100", a.Stats().Issued)
		}
	}
}
