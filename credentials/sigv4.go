package credentials

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/aileron-dev/aileron-proxy/internal/hostport"
)

// This file is the aws_sigv4 kind: the client signs with placeholder keys,
// and the proxy drops that signature and signs the request again with the
// real credentials, using the AWS SDK's own signer.

// AWSSigV4 is the AWS part of an aws_sigv4 binding. The secret access key
// is Binding.Source; or, with Profile, all three come from the host's AWS
// configuration.
type AWSSigV4 struct {
	// AccessKeyID is where the access key id comes from.
	AccessKeyID Source
	// SessionToken, when set, is where a temporary credential's session
	// token comes from.
	SessionToken Source
	// Profile names a profile of the host's shared AWS config and
	// credentials files (SSO, role chaining and credential_process
	// included), read through the SDK and refreshed before expiry.
	Profile string
	// Region and Service override what the host name says; empty means
	// derive them (then the client's own credential scope).
	Region, Service string
}

func (a *AWSSigV4) equal(o *AWSSigV4) bool {
	return sourceEqual(a.AccessKeyID, o.AccessKeyID) && sourceEqual(a.SessionToken, o.SessionToken) &&
		a.Profile == o.Profile && a.Region == o.Region && a.Service == o.Service
}

func (a *AWSSigV4) describeSource(secret Source) string {
	if a.Profile != "" {
		return "aws profile " + a.Profile
	}
	s := "key id " + a.AccessKeyID.Describe() + ", secret " + secret.Describe()
	if !a.SessionToken.IsZero() {
		s += ", session token " + a.SessionToken.Describe()
	}
	return s
}

func (a *AWSSigV4) describePlacement() string {
	s := "AWS SigV4 signature"
	if a.Region != "" {
		s += " region " + a.Region
	}
	if a.Service != "" {
		s += " service " + a.Service
	}
	return s
}

var (
	awsScopeRe   = regexp.MustCompile(`^[a-z0-9-]{1,64}$`)
	awsProfileRe = regexp.MustCompile(`^[A-Za-z0-9_.@+=,/-]{1,128}$`)
)

func (b Binding) validateAWS() error {
	a := b.AWS
	switch {
	case b.Kind != KindAWSSigV4:
		return fmt.Errorf("AWS settings need kind aws_sigv4, not %q", b.Kind)
	case a == nil:
		return errors.New("kind aws_sigv4 needs an access key id and a secret access key, or --from-aws-profile NAME")
	case b.OAuth2 != nil || b.Username != "" || b.Placement != (Placement{}):
		return errors.New("kind aws_sigv4 signs the whole request; drop the oauth2, username, header, format and query settings")
	}
	for what, v := range map[string]string{"region": a.Region, "service": a.Service} {
		if v != "" && !awsScopeRe.MatchString(v) {
			return fmt.Errorf("AWS %s %q is not valid; use lower-case letters, digits and '-', e.g. \"eu-west-1\" or \"s3\"", what, v)
		}
	}
	if a.Profile != "" {
		if !b.Source.IsZero() || !a.AccessKeyID.IsZero() || !a.SessionToken.IsZero() {
			return errors.New("an AWS profile supplies the keys itself; drop the access key id, secret and session token sources")
		}
		if !awsProfileRe.MatchString(a.Profile) {
			return fmt.Errorf("AWS profile name %q is not valid", a.Profile)
		}
		return nil
	}
	if a.AccessKeyID.IsZero() || b.Source.IsZero() {
		return errors.New("kind aws_sigv4 needs both an access key id source and a secret access key source (or --from-aws-profile NAME)")
	}
	if err := a.AccessKeyID.validate("access key id"); err != nil {
		return err
	}
	if err := b.Source.validate("secret access key"); err != nil {
		return err
	}
	if !a.SessionToken.IsZero() {
		return a.SessionToken.validate("session token")
	}
	return nil
}

// ErrAWSRequest matches a request the aws_sigv4 kind cannot re-sign as
// sent; its message says what the client should change.
var ErrAWSRequest = errors.New("request cannot be re-signed")

type awsRequestError struct{ msg string }

func (e *awsRequestError) Error() string        { return e.msg }
func (e *awsRequestError) Is(target error) bool { return target == ErrAWSRequest }

// MaxAWSHashedBody is the largest body the proxy reads to hash when the
// client declared no X-Amz-Content-Sha256 (as the AWS CLI does for
// everything but S3).
const MaxAWSHashedBody = 8 << 20

// awsSigner signs for one aws_sigv4 binding.
type awsSigner struct {
	a                    *AWSSigV4
	keyID, secret, token *sourceReader
	profile              func(context.Context) (aws.Credentials, error)
	signer, s3           *v4.Signer
	last                 atomic.Pointer[awsApplied]
}

type awsApplied struct {
	secret, token string
	s             *Scrubber
}

func newAWSSigner(b Binding, d *deps) *awsSigner {
	s := &awsSigner{a: b.AWS, signer: v4.NewSigner(), s3: v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })}
	if b.AWS.Profile != "" {
		s.profile = profileCredentials(b.AWS.Profile)
		return s
	}
	s.keyID = &sourceReader{src: b.AWS.AccessKeyID, what: "access key id", deps: d}
	s.secret = &sourceReader{src: b.Source, what: "secret access key", deps: d}
	if !b.AWS.SessionToken.IsZero() {
		s.token = &sourceReader{src: b.AWS.SessionToken, what: "session token", deps: d}
	}
	return s
}

// profileCredentials loads the profile once, through the SDK's default
// chain, and returns its cached provider, which refreshes temporary
// credentials before they expire.
func profileCredentials(name string) func(context.Context) (aws.Credentials, error) {
	var once sync.Once
	var prov aws.CredentialsProvider
	var loadErr error
	return func(ctx context.Context) (aws.Credentials, error) {
		once.Do(func() {
			cfg, err := config.LoadDefaultConfig(context.Background(), config.WithSharedConfigProfile(name))
			if err != nil {
				loadErr = reasonf("loading AWS profile %q: %s", name, err.Error())
				return
			}
			prov = cfg.Credentials
		})
		if loadErr != nil {
			return aws.Credentials{}, loadErr
		}
		c, err := prov.Retrieve(ctx)
		if err != nil {
			return aws.Credentials{}, reasonf("retrieving credentials of AWS profile %q: %s", name, err.Error())
		}
		return c, nil
	}
}

func (s *awsSigner) credentials(ctx context.Context) (aws.Credentials, error) {
	if s.profile != nil {
		return s.profile(ctx)
	}
	id, err := s.keyID.read(ctx)
	if err != nil {
		return aws.Credentials{}, err
	}
	secret, err := s.secret.read(ctx)
	if err != nil {
		return aws.Credentials{}, err
	}
	c := aws.Credentials{AccessKeyID: id.Reveal(), SecretAccessKey: secret.Reveal(), Source: "aileron-proxy"}
	if s.token != nil {
		tok, err := s.token.read(ctx)
		if err != nil {
			return aws.Credentials{}, err
		}
		c.SessionToken = tok.Reveal()
	}
	return c, nil
}

// scrubber returns the Scrubber of the secret and the session token.
func (s *awsSigner) scrubber(c aws.Credentials) (*Scrubber, error) {
	if a := s.last.Load(); a != nil && a.secret == c.SecretAccessKey && a.token == c.SessionToken {
		return a.s, nil
	}
	sc, err := NewScrubber(NewValue(c.SecretAccessKey), NewValue(c.SessionToken))
	if err != nil {
		return nil, err
	}
	s.last.Store(&awsApplied{secret: c.SecretAccessKey, token: c.SessionToken, s: sc})
	return sc, nil
}

// Headers and query parameters of a client's own signature.
var (
	awsSignatureHeaders = []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token"}
	awsSignatureQuery   = []string{"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
		"X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Security-Token"}
)

const (
	headerContentSHA256 = "X-Amz-Content-Sha256"
	unsignedPayload     = "UNSIGNED-PAYLOAD"
)

// applyAWS drops the client's signature from out and signs it again.
func (i *Injector) applyAWS(ctx context.Context, out *http.Request) (*Scrubber, error) {
	s := i.aws
	if out.Header == nil {
		out.Header = http.Header{}
	}
	clientRegion, clientService := clientScope(out)
	hash := out.Header.Get(headerContentSHA256)
	switch {
	case strings.HasPrefix(hash, "STREAMING-") && hash != "STREAMING-UNSIGNED-PAYLOAD-TRAILER":
		return nil, &awsRequestError{msg: fmt.Sprintf("the request body is aws-chunked and signed chunk by chunk (%s), which the proxy cannot re-sign; "+
			"set payload_signing_enabled = false in the s3 section of the AWS CLI config (~/.aws/config), or the SDK's equivalent, so the client sends UNSIGNED-PAYLOAD", hash)}
	case hash == "":
		sum, err := hashBody(out)
		if err != nil {
			return nil, err
		}
		hash = sum
	}
	c, err := s.credentials(ctx)
	if err != nil {
		return nil, i.fail(err)
	}
	sc, err := s.scrubber(c)
	if err != nil {
		return nil, i.fail(reasonf("the AWS credential is not usable: %s", err.Error()))
	}
	for _, h := range awsSignatureHeaders {
		out.Header.Del(h)
	}
	if out.URL.RawQuery != "" {
		q := out.URL.Query()
		dropped := false
		for _, k := range awsSignatureQuery {
			if q.Has(k) {
				q.Del(k)
				dropped = true
			}
		}
		if dropped {
			out.URL.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
		}
	}
	host := out.Host
	if host == "" {
		host = out.URL.Host
	}
	region, service := AWSScope(host)
	if s.a.Region != "" {
		region = s.a.Region
	} else if region == "" {
		region = clientRegion
	}
	if s.a.Service != "" {
		service = s.a.Service
	} else if service == "" {
		service = clientService
	}
	if region == "" || service == "" {
		return nil, &awsRequestError{msg: fmt.Sprintf("the AWS region and service of %s cannot be derived from its name; set them on the credential (--aws-region, --aws-service)", host)}
	}
	// The proxy asks for an identity body to scrub it; sign what is sent.
	out.Header.Set("Accept-Encoding", "identity")
	signer := s.signer
	if service == "s3" {
		signer = s.s3
	}
	if err := signer.SignHTTP(ctx, c, out, hash, service, region, time.Now().UTC()); err != nil {
		return nil, i.fail(reasonf("signing the request: %s", err.Error()))
	}
	return sc, nil
}

// hashBody reads out's body (at most MaxAWSHashedBody), puts it back and
// returns its hex SHA-256.
func hashBody(out *http.Request) (string, error) {
	if out.Body == nil || out.Body == http.NoBody {
		sum := sha256.Sum256(nil)
		return hex.EncodeToString(sum[:]), nil
	}
	data, err := io.ReadAll(io.LimitReader(out.Body, MaxAWSHashedBody+1))
	if err != nil {
		return "", fmt.Errorf("reading the request body to sign it: %w", err)
	}
	if len(data) > MaxAWSHashedBody {
		return "", &awsRequestError{msg: fmt.Sprintf("the request declares no %s and its body is over %d MiB, too large to hash before signing; send the header (UNSIGNED-PAYLOAD or the body's hash)", headerContentSHA256, MaxAWSHashedBody>>20)}
	}
	_ = out.Body.Close()
	out.Body = io.NopCloser(bytes.NewReader(data))
	out.ContentLength = int64(len(data))
	out.TransferEncoding = nil
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// clientScope returns the region and service of the client's own
// signature (from the Authorization header or the query).
func clientScope(r *http.Request) (region, service string) {
	cred := ""
	if auth := r.Header.Get("Authorization"); strings.HasPrefix(auth, "AWS4-HMAC-SHA256 ") {
		for _, part := range strings.Split(strings.TrimPrefix(auth, "AWS4-HMAC-SHA256 "), ",") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(part), "Credential="); ok {
				cred = v
			}
		}
	} else if r.URL != nil {
		cred, _ = url.QueryUnescape(r.URL.Query().Get("X-Amz-Credential"))
	}
	f := strings.Split(cred, "/")
	if len(f) != 5 || f[4] != "aws4_request" || !awsScopeRe.MatchString(f[2]) || !awsScopeRe.MatchString(f[3]) {
		return "", ""
	}
	return f[2], f[3]
}

// AWSScope derives the signing region and service from an AWS host name:
// "sts.amazonaws.com" (us-east-1, sts), "s3.eu-west-1.amazonaws.com",
// virtual-hosted buckets "bucket.s3.eu-west-1.amazonaws.com" and
// "bucket.s3.amazonaws.com", and "SERVICE.REGION.amazonaws.com". It
// returns empty strings for other names.
func AWSScope(host string) (region, service string) {
	if hp, err := hostport.New(host); err == nil {
		host = hp.Host
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	var rest string
	var ok bool
	for _, suffix := range []string{".amazonaws.com.cn", ".amazonaws.com"} {
		if rest, ok = strings.CutSuffix(host, suffix); ok {
			break
		}
	}
	if !ok || rest == "" {
		return "", ""
	}
	labels := strings.Split(rest, ".")
	for k, l := range labels {
		switch {
		case l == "s3" || l == "s3-external-1":
			region = "us-east-1"
			for _, next := range labels[k+1:] {
				if next != "dualstack" && next != "s3-accelerate" && awsScopeRe.MatchString(next) {
					region = next
					break
				}
			}
			return region, "s3"
		case strings.HasPrefix(l, "s3-") && l != "s3-accelerate" && awsScopeRe.MatchString(strings.TrimPrefix(l, "s3-")):
			return strings.TrimPrefix(l, "s3-"), "s3" // legacy s3-REGION
		}
	}
	for _, l := range labels {
		if !awsScopeRe.MatchString(l) {
			return "", ""
		}
	}
	switch len(labels) {
	case 1:
		return "us-east-1", labels[0] // global: sts, iam
	case 2:
		return labels[1], labels[0]
	}
	return "", ""
}
