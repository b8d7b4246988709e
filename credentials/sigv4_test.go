package credentials

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestAWSScope(t *testing.T) {
	tests := []struct{ host, region, service string }{
		{"sts.amazonaws.com", "us-east-1", "sts"},
		{"sts.eu-west-1.amazonaws.com:443", "eu-west-1", "sts"},
		{"s3.amazonaws.com", "us-east-1", "s3"},
		{"s3.eu-west-1.amazonaws.com", "eu-west-1", "s3"},
		{"my-bucket.s3.amazonaws.com", "us-east-1", "s3"},
		{"my.bucket.s3.eu-central-1.amazonaws.com", "eu-central-1", "s3"},
		{"my-bucket.s3.dualstack.us-west-2.amazonaws.com", "us-west-2", "s3"},
		{"s3-us-west-1.amazonaws.com", "us-west-1", "s3"},
		{"dynamodb.ap-south-1.amazonaws.com", "ap-south-1", "dynamodb"},
		{"iam.amazonaws.com", "us-east-1", "iam"},
		{"s3.cn-north-1.amazonaws.com.cn", "cn-north-1", "s3"},
		{"example.com", "", ""},
		{"amazonaws.com", "", ""},
		{"a.b.c.amazonaws.com", "", ""},
	}
	for _, tc := range tests {
		if r, s := AWSScope(tc.host); r != tc.region || s != tc.service {
			t.Errorf("AWSScope(%q) = %q, %q; want %q, %q", tc.host, r, s, tc.region, tc.service)
		}
	}
}

func TestAWSBindingValidate(t *testing.T) {
	env := func(v string) Source { return Source{Type: SourceEnv, Ref: v} }
	tests := []struct {
		name string
		b    Binding
		err  string
	}{
		{"keys", Binding{FQN: "github://a/b", Kind: KindAWSSigV4, Source: env("SECRET"), AWS: &AWSSigV4{AccessKeyID: env("KEY")}}, ""},
		{"profile", Binding{FQN: "github://a/b", Kind: KindAWSSigV4, AWS: &AWSSigV4{Profile: "corp", Region: "eu-west-1"}}, ""},
		{"no aws", Binding{FQN: "github://a/b", Kind: KindAWSSigV4, Source: env("SECRET")}, "needs an access key id"},
		{"no key id", Binding{FQN: "github://a/b", Kind: KindAWSSigV4, Source: env("SECRET"), AWS: &AWSSigV4{}}, "needs both"},
		{"profile and keys", Binding{FQN: "github://a/b", Kind: KindAWSSigV4, Source: env("SECRET"), AWS: &AWSSigV4{Profile: "corp"}}, "supplies the keys itself"},
		{"bad region", Binding{FQN: "github://a/b", Kind: KindAWSSigV4, AWS: &AWSSigV4{Profile: "corp", Region: "EU West"}}, "region"},
		{"wrong kind", Binding{FQN: "github://a/b", Kind: KindBearer, Source: env("SECRET"), AWS: &AWSSigV4{Profile: "corp"}}, "need kind aws_sigv4"},
		{"placement", Binding{FQN: "github://a/b", Kind: KindAWSSigV4, AWS: &AWSSigV4{Profile: "corp"}, Placement: Placement{Header: "X"}}, "signs the whole request"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.b.Validate()
			if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.err)
			}
		})
	}
}

func TestAWSFileRoundTrip(t *testing.T) {
	f := &File{}
	f.Set(Binding{FQN: "github://a/aws", Kind: KindAWSSigV4, Source: Source{Type: SourceStored, Value: NewValue("real-secret-1234")},
		AWS: &AWSSigV4{AccessKeyID: Source{Type: SourceEnv, Ref: "KEY"}, SessionToken: Source{Type: SourceFile, Ref: "/run/token"}, Region: "eu-west-1"}})
	data, err := f.marshal()
	if err != nil {
		t.Fatal(err)
	}
	g, err := parseFile(data)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := g.Get("github://a/aws", KindAWSSigV4)
	if b.AWS == nil || b.AWS.AccessKeyID.Ref != "KEY" || b.AWS.SessionToken.Ref != "/run/token" || b.AWS.Region != "eu-west-1" || b.Source.Value.Reveal() != "real-secret-1234" {
		t.Fatalf("round trip = %+v", b)
	}
	if d := b.DescribeSource(); strings.Contains(d, "real-secret") || !strings.Contains(d, "env KEY") {
		t.Fatalf("DescribeSource() = %q", d)
	}
}

// TestAWSApply re-signs a request signed with placeholder keys: the
// client's signature and query signature are gone, the real key id signs,
// the declared payload hash is kept, and aws-chunked signed uploads are
// refused with the CLI setting that avoids them.
func TestAWSApply(t *testing.T) {
	env := map[string]string{"KEY": "AKIAREAL0000", "SECRET": "real-secret-5678", "TOKEN": "real-token-9012"}
	r, err := NewResolver(ResolverConfig{File: fileWith(Binding{FQN: "github://a/aws", Kind: KindAWSSigV4,
		Source: Source{Type: SourceEnv, Ref: "SECRET"},
		AWS:    &AWSSigV4{AccessKeyID: Source{Type: SourceEnv, Ref: "KEY"}, SessionToken: Source{Type: SourceEnv, Ref: "TOKEN"}}}),
		Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	inj, _ := r.Lookup("github://a/aws", KindAWSSigV4)
	out, _ := http.NewRequest(http.MethodGet, "https://s3.eu-west-1.amazonaws.com/bucket/key?X-Amz-Signature=abc&X-Amz-Credential=PLACEHOLDER%2F20260101%2Feu-west-1%2Fs3%2Faws4_request&versionId=1", nil)
	out.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=PLACEHOLDER/20260101/eu-west-1/s3/aws4_request, SignedHeaders=host, Signature=00")
	out.Header.Set("X-Amz-Security-Token", "placeholder-token")
	out.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	sc, err := inj.Apply(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	auth := out.Header.Get("Authorization")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=AKIAREAL0000/") || !strings.Contains(auth, "/eu-west-1/s3/aws4_request") ||
		strings.Contains(out.URL.RawQuery, "X-Amz-") || !strings.Contains(out.URL.RawQuery, "versionId=1") ||
		out.Header.Get("X-Amz-Security-Token") != "real-token-9012" || out.Header.Get("X-Amz-Content-Sha256") != "UNSIGNED-PAYLOAD" {
		t.Fatalf("re-signed request: Authorization %q, query %q, header %v", auth, out.URL.RawQuery, out.Header)
	}
	if got := string(sc.Bytes([]byte("x real-secret-5678 real-token-9012 y"))); strings.Contains(got, "real-") {
		t.Fatalf("scrubber left a secret: %q", got)
	}

	chunked, _ := http.NewRequest(http.MethodPut, "https://s3.amazonaws.com/bucket/key", strings.NewReader("x"))
	chunked.Header.Set("X-Amz-Content-Sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
	if _, err := inj.Apply(context.Background(), chunked); !errors.Is(err, ErrAWSRequest) || !strings.Contains(err.Error(), "payload_signing_enabled = false") {
		t.Fatalf("aws-chunked upload: %v, want a refusal naming payload_signing_enabled", err)
	}
	unknown, _ := http.NewRequest(http.MethodGet, "https://api.example.com/", nil)
	if _, err := inj.Apply(context.Background(), unknown); !errors.Is(err, ErrAWSRequest) || !strings.Contains(err.Error(), "--aws-region") {
		t.Fatalf("unknown host: %v", err)
	}
}

func fileWith(bs ...Binding) *File {
	f := &File{}
	for _, b := range bs {
		f.Set(b)
	}
	return f
}

// FuzzAWSScope checks that any host name yields either nothing or a
// region and service of the signing grammar.
func FuzzAWSScope(f *testing.F) {
	for _, s := range []string{"sts.amazonaws.com", "b.s3.eu-west-1.amazonaws.com:443", "s3-us-west-1.amazonaws.com", "x.amazonaws.com.cn", "..amazonaws.com"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		r, s := AWSScope(host)
		if (r == "") != (s == "") || (r != "" && (!awsScopeRe.MatchString(r) || !awsScopeRe.MatchString(s))) {
			t.Fatalf("AWSScope(%q) = %q, %q", host, r, s)
		}
		req, _ := http.NewRequest(http.MethodGet, "https://h/", nil)
		req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+host)
		if r, s := clientScope(req); r != "" && (!awsScopeRe.MatchString(r) || !awsScopeRe.MatchString(s)) {
			t.Fatalf("clientScope(%q) = %q, %q", host, r, s)
		}
	})
}
