package integration

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// Real and placeholder AWS keys. The sandbox (the AWS CLI) holds only the
// placeholders; the real secret is the canary every test scans for.
const (
	awsRealKeyID      = "AKIAREALKEY000000001"
	awsSessionToken   = "session-token-SECRET-9d8c7b6a5f4e"
	awsPlaceholderID  = "AKIAPLACEHOLDER00000"
	awsPlaceholderKey = "placeholder-not-a-secret"
)

// awsStandIn stands in for S3 and STS: it verifies every request's SigV4
// signature with the real secret using the SDK's signer, and serves a
// bucket from memory.
type awsStandIn struct {
	keyID, secret, token string

	mu       sync.Mutex
	objects  map[string][]byte
	verified map[string]int // "METHOD service" -> count
	bad      []string
}

func (s *awsStandIn) fail(w http.ResponseWriter, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.bad = append(s.bad, msg)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusForbidden)
	fmt.Fprintf(w, `<Error><Code>SignatureDoesNotMatch</Code><Message>%s</Message></Error>`, msg)
}

// verify checks r's signature; it returns the body (read whole when the
// payload hash has to be computed) or false after answering.
func (s *awsStandIn) verify(w http.ResponseWriter, r *http.Request) (string, bool) {
	auth := r.Header.Get("Authorization")
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		s.fail(w, "no SigV4 Authorization on %s %s", r.Method, r.URL.Path)
		return "", false
	}
	var cred, signed, sig string
	for _, p := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
		switch k {
		case "Credential":
			cred = v
		case "SignedHeaders":
			signed = v
		case "Signature":
			sig = v
		}
	}
	scope := strings.Split(cred, "/")
	if len(scope) != 5 || scope[0] != s.keyID {
		s.fail(w, "credential %q is not the real key id", cred)
		return "", false
	}
	region, service := scope[2], scope[3]
	if s.token != "" && r.Header.Get("X-Amz-Security-Token") != s.token {
		s.fail(w, "the session token is missing or wrong")
		return "", false
	}
	when, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		s.fail(w, "bad X-Amz-Date")
		return "", false
	}
	hash := r.Header.Get("X-Amz-Content-Sha256")
	if hash == "" {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		hash = fmt.Sprintf("%x", sha256sum(body))
	}
	check, _ := http.NewRequest(r.Method, "https://"+r.Host+r.URL.RequestURI(), nil)
	check.Host = r.Host
	for _, h := range strings.Split(signed, ";") {
		switch h {
		case "host", "x-amz-date", "x-amz-security-token":
		case "content-length":
			check.ContentLength = r.ContentLength
		default:
			check.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = service == "s3" })
	creds := aws.Credentials{AccessKeyID: s.keyID, SecretAccessKey: s.secret, SessionToken: s.token}
	if err := signer.SignHTTP(context.Background(), creds, check, hash, service, region, when); err != nil {
		s.fail(w, "signing for verification: %v", err)
		return "", false
	}
	if want := check.Header.Get("Authorization"); !strings.HasSuffix(want, "Signature="+sig) {
		s.fail(w, "signature of %s %s does not verify with the real secret (got %s; want %s)", r.Method, r.URL.Path, auth, want)
		return "", false
	}
	s.mu.Lock()
	s.verified[r.Method+" "+service]++
	s.mu.Unlock()
	return hash, true
}

func sha256sum(b []byte) []byte { s := sha256.Sum256(b); return s[:] }

func (s *awsStandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.verify(w, r); !ok {
		return
	}
	w.Header().Set("Content-Type", "text/xml")
	if strings.HasPrefix(r.Host, "sts.") {
		body, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(body), "Action=GetCallerIdentity") {
			http.Error(w, "unexpected STS call", http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, `<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><GetCallerIdentityResult>`+
			`<Arn>arn:aws:iam::123456789012:user/agent</Arn><UserId>AIDAEXAMPLE</UserId><Account>123456789012</Account>`+
			`</GetCallerIdentityResult><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></GetCallerIdentityResponse>`)
		return
	}
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case r.Method == http.MethodGet && key == "":
		var b strings.Builder
		fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>%s</Name><Prefix></Prefix><KeyCount>%d</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>`, bucket, len(s.objects))
		for k, v := range s.objects {
			fmt.Fprintf(&b, `<Contents><Key>%s</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified><ETag>"%x"</ETag><Size>%d</Size><StorageClass>STANDARD</StorageClass></Contents>`, k, md5.Sum(v), len(v))
		}
		b.WriteString(`</ListBucketResult>`)
		fmt.Fprint(w, b.String())
	case r.Method == http.MethodPut:
		s.mu.Unlock()
		body, err := io.ReadAll(r.Body)
		s.mu.Lock()
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.objects[key] = body
		w.Header().Set("ETag", fmt.Sprintf(`"%x"`, md5.Sum(body)))
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		v, ok := s.objects[key]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("ETag", fmt.Sprintf(`"%x"`, md5.Sum(v)))
		w.Header().Set("Last-Modified", "Thu, 01 Jan 2026 00:00:00 GMT")
		w.Header().Set("Content-Length", fmt.Sprint(len(v)))
		if r.Method == http.MethodGet {
			_, _ = w.Write(v)
		}
	default:
		http.Error(w, "not served", http.StatusMethodNotAllowed)
	}
}

var awsHosts = []string{"s3.amazonaws.com", "s3.us-east-1.amazonaws.com", "sts.amazonaws.com", "sts.us-east-1.amazonaws.com"}

// awsEnv starts the stand-in and serve with the AWS connector, bound by
// bind (credential set arguments after the FQN); env is serve's extra
// environment.
func awsEnv(t *testing.T, standIn *awsStandIn, serveEnv []string, bind ...string) (*env, *upstream) {
	t.Helper()
	up := newUpstream(t, awsHosts, standIn)
	home := t.TempDir()
	mustCLI(t, home, "", "connector", "install", "../configs/connectors/aws.aileron.connector.v1.json")
	mustCLI(t, home, "", append([]string{"credential", "set", "github://acme/aileron-connector-aws", "--kind", "aws_sigv4"}, bind...)...)
	flags := []string{"--upstream-ca", up.certFile}
	for _, h := range awsHosts {
		flags = append(flags, "--resolve", h+":443="+up.addr)
	}
	d := startServe(t, home, serveEnv, flags...)
	e := &env{home: home, up: up, d: d, s: createSession(t, home)}
	t.Cleanup(func() { e.assertNoCanary(t); e.assertNoSecret(t, awsSessionToken) })
	return e, up
}

// assertNoSecret checks serve's log and everything under home for secret.
func (e *env) assertNoSecret(t *testing.T, secret string) {
	t.Helper()
	if strings.Contains(e.d.stderr.String(), secret) {
		t.Errorf("serve's log contains a secret")
	}
	_ = filepath.Walk(e.home, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || filepath.Base(p) == "credentials.json" {
			return nil
		}
		if b, _ := os.ReadFile(p); strings.Contains(string(b), secret) {
			t.Errorf("%s contains a secret", p)
		}
		return nil
	})
}

// awsCLI runs Debian's AWS CLI as a sandbox would: placeholder keys, the
// session's proxy and CA, path-style S3 addressing and no multipart upload.
func awsCLI(t *testing.T, e *env, args ...string) (string, error) {
	t.Helper()
	bin := "/usr/bin/aws" // Debian's awscli; another aws may be first on PATH
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Debian's awscli is missing at %s", bin)
		}
		t.Skip("Debian's awscli is not installed at /usr/bin/aws")
	}
	home := filepath.Join(e.home, "..", "awshome")
	_ = os.MkdirAll(filepath.Join(home, ".aws"), 0o700)
	conf := "[default]\nregion = us-east-1\ns3 =\n  addressing_style = path\n  multipart_threshold = 64MB\n"
	if err := os.WriteFile(filepath.Join(home, ".aws", "config"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = testkit.CleanEnv("HOME="+home, "AWS_CONFIG_FILE="+filepath.Join(home, ".aws", "config"),
		"AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(home, ".aws", "credentials"),
		"AWS_ACCESS_KEY_ID="+awsPlaceholderID, "AWS_SECRET_ACCESS_KEY="+awsPlaceholderKey,
		"HTTPS_PROXY="+e.s.ProxyURL, "AWS_CA_BUNDLE="+e.s.CAFile, "AWS_EC2_METADATA_DISABLED=true", "AWS_PAGER=")
	out, err := cmd.CombinedOutput()
	for _, s := range []string{canary, awsSessionToken} {
		if strings.Contains(string(out), s) {
			t.Errorf("the AWS CLI's output contains a real secret")
		}
	}
	return string(out), err
}

// TestAWSCLIResignedOnTheHost runs Debian's AWS CLI with placeholder keys
// through the proxy against a stand-in that verifies every signature with
// the real secret: STS, s3 ls, cp up and down, a 20 MiB upload; an
// undeclared operation is refused before the stand-in sees it.
func TestAWSCLIResignedOnTheHost(t *testing.T) {
	standIn := &awsStandIn{keyID: awsRealKeyID, secret: canary, token: awsSessionToken, objects: map[string][]byte{}, verified: map[string]int{}}
	dir := t.TempDir()
	files := map[string]string{"key": awsRealKeyID, "secret": canary, "token": awsSessionToken}
	for name, v := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e, _ := awsEnv(t, standIn, nil, "--access-key-id-from-file", filepath.Join(dir, "key"),
		"--from-file", filepath.Join(dir, "secret"), "--session-token-from-file", filepath.Join(dir, "token"))

	out, err := awsCLI(t, e, "sts", "get-caller-identity", "--output", "text")
	if err != nil || !strings.Contains(out, "123456789012") || !strings.Contains(out, "arn:aws:iam::123456789012:user/agent") {
		t.Fatalf("aws sts get-caller-identity: %v\n%s", err, out)
	}
	small := filepath.Join(t.TempDir(), "small.txt")
	if err := os.WriteFile(small, []byte("hello from the sandbox\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := awsCLI(t, e, "s3", "cp", small, "s3://agent-bucket/small.txt"); err != nil {
		t.Fatalf("aws s3 cp up: %v\n%s", err, out)
	}
	big := make([]byte, 20<<20)
	_, _ = rand.Read(big)
	bigFile := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(bigFile, big, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := awsCLI(t, e, "s3", "cp", bigFile, "s3://agent-bucket/big.bin"); err != nil {
		t.Fatalf("aws s3 cp of 20 MiB: %v\n%s", err, out)
	}
	out, err = awsCLI(t, e, "s3", "ls", "s3://agent-bucket")
	if err != nil || !strings.Contains(out, "small.txt") || !strings.Contains(out, "big.bin") || !strings.Contains(out, fmt.Sprint(20<<20)) {
		t.Fatalf("aws s3 ls: %v\n%s", err, out)
	}
	down := filepath.Join(t.TempDir(), "down.txt")
	if out, err := awsCLI(t, e, "s3", "cp", "s3://agent-bucket/small.txt", down); err != nil {
		t.Fatalf("aws s3 cp down: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(down); string(b) != "hello from the sandbox\n" {
		t.Fatalf("downloaded %q", b)
	}
	standIn.mu.Lock()
	gotBig := standIn.objects["big.bin"]
	standIn.mu.Unlock()
	if hex.EncodeToString(md5sum(gotBig)) != hex.EncodeToString(md5sum(big)) {
		t.Fatalf("the stand-in stored %d bytes of the 20 MiB upload, not the file", len(gotBig))
	}

	before := len(e.up.requests())
	out, err = awsCLI(t, e, "s3", "rm", "s3://agent-bucket/small.txt")
	if err == nil || !strings.Contains(out, "403") && !strings.Contains(out, "Forbidden") {
		t.Fatalf("aws s3 rm (undeclared DeleteObject) = %v\n%s, want refused", err, out)
	}
	if len(e.up.requests()) != before {
		t.Fatal("the undeclared DeleteObject reached the stand-in")
	}
	waitAudit(t, e.home, map[string]any{"event": "connector.proxy.denied", "method": "DELETE"})

	standIn.mu.Lock()
	defer standIn.mu.Unlock()
	if len(standIn.bad) > 0 {
		t.Fatalf("the stand-in saw signatures that do not verify: %v", standIn.bad)
	}
	for _, want := range []string{"POST sts", "PUT s3", "GET s3", "HEAD s3"} {
		if standIn.verified[want] == 0 {
			t.Errorf("no verified %s request (verified: %v)", want, standIn.verified)
		}
	}
	for _, r := range e.up.requests() {
		if strings.Contains(r.Header.Get("Authorization"), awsPlaceholderID) {
			t.Errorf("the placeholder signature reached the stand-in")
		}
	}
}

func md5sum(b []byte) []byte { s := md5.Sum(b); return s[:] }

// TestAWSProfileTemporaryCredential binds the host's AWS profile
// (--from-aws-profile): its credential_process hands out a temporary
// credential with a session token, which serve signs with through the
// SDK's config loader.
func TestAWSProfileTemporaryCredential(t *testing.T) {
	const tempKeyID = "ASIATEMPORARY0000001"
	standIn := &awsStandIn{keyID: tempKeyID, secret: canary, token: awsSessionToken, objects: map[string][]byte{"a.txt": []byte("a")}, verified: map[string]int{}}
	dir := t.TempDir()
	creds := fmt.Sprintf(`{"Version":1,"AccessKeyId":%q,"SecretAccessKey":%q,"SessionToken":%q,"Expiration":%q}`,
		tempKeyID, canary, awsSessionToken, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	if err := os.WriteFile(filepath.Join(dir, "creds.json"), []byte(creds), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("[profile corp]\nregion = us-east-1\ncredential_process = /bin/cat %s\n", filepath.Join(dir, "creds.json"))
	if err := os.WriteFile(filepath.Join(dir, "config"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	e, _ := awsEnv(t, standIn, []string{"AWS_CONFIG_FILE=" + filepath.Join(dir, "config"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(dir, "none"),
		"AWS_EC2_METADATA_DISABLED=true"}, "--from-aws-profile", "corp")
	if out, err := awsCLI(t, e, "sts", "get-caller-identity", "--output", "text"); err != nil || !strings.Contains(out, "123456789012") {
		t.Fatalf("aws sts get-caller-identity with a profile binding: %v\n%s", err, out)
	}
	if out, err := awsCLI(t, e, "s3", "ls", "s3://agent-bucket"); err != nil || !strings.Contains(out, "a.txt") {
		t.Fatalf("aws s3 ls with a profile binding: %v\n%s", err, out)
	}
	standIn.mu.Lock()
	defer standIn.mu.Unlock()
	if len(standIn.bad) > 0 || standIn.verified["POST sts"] == 0 || standIn.verified["GET s3"] == 0 {
		t.Fatalf("stand-in: bad %v, verified %v", standIn.bad, standIn.verified)
	}
}
