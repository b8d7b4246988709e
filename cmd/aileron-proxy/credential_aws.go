package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/aileron-dev/aileron-proxy/credentials"
)

// awsCredentialFlags are credential set's flags for --kind aws_sigv4.
type awsCredentialFlags struct {
	keyIDEnv, keyIDFile string
	tokenEnv, tokenFile string
	profile             string
	region, service     string
}

var awsFlagNames = []string{"access-key-id-from-env", "access-key-id-from-file", "session-token-from-env", "session-token-from-file",
	"from-aws-profile", "aws-region", "aws-service"}

func (f *awsCredentialFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.keyIDEnv, "access-key-id-from-env", "", "aws_sigv4: read the access key id from serve's environment variable `VAR`")
	fl.StringVar(&f.keyIDFile, "access-key-id-from-file", "", "aws_sigv4: read the access key id from the file at `PATH`")
	fl.StringVar(&f.tokenEnv, "session-token-from-env", "", "aws_sigv4: read a temporary credential's session token from serve's environment variable `VAR`")
	fl.StringVar(&f.tokenFile, "session-token-from-file", "", "aws_sigv4: read a temporary credential's session token from the file at `PATH`")
	fl.StringVar(&f.profile, "from-aws-profile", "", "aws_sigv4: take the keys from the host's AWS profile `NAME` (shared config and credentials files, SSO, role chaining; refreshed)")
	fl.StringVar(&f.region, "aws-region", "", "aws_sigv4: signing `REGION` when the host name does not say it")
	fl.StringVar(&f.service, "aws-service", "", "aws_sigv4: signing `SERVICE` when the host name does not say it")
}

// awsBinding completes b (kind aws_sigv4) from the flags: the secret
// access key from the usual secret source, the key id and session token
// from their own flags, or everything from --from-aws-profile.
func (f *awsCredentialFlags) awsBinding(a *app, b credentials.Binding, given func(...string) []string, secretFlags []string, sf *credentialSetFlags) (credentials.Binding, error) {
	usagef := func(format string, args ...any) error { return usageError(fmt.Errorf(format, args...)) }
	if other := given("username", "header", "format", "query", "token-url", "client-id", "client-secret-from-env", "client-secret-from-file",
		"refresh-token-from-env", "refresh-token-from-file", "refresh-token-stdin", "scope"); len(other) > 0 {
		return b, usagef("--kind aws_sigv4 signs the whole request; drop %s", strings.Join(other, ", "))
	}
	aws := &credentials.AWSSigV4{Profile: f.profile, Region: f.region, Service: f.service}
	b.AWS = aws
	keyFlags := given("access-key-id-from-env", "access-key-id-from-file")
	tokenFlags := given("session-token-from-env", "session-token-from-file")
	if f.profile != "" {
		if all := append(append(secretFlags, keyFlags...), tokenFlags...); len(all) > 0 {
			return b, usagef("--from-aws-profile supplies the keys itself; drop %s", strings.Join(all, ", "))
		}
		return b, validated(b)
	}
	switch {
	case len(keyFlags) != 1:
		return b, usagef("--kind aws_sigv4 needs one of --access-key-id-from-env VAR or --access-key-id-from-file PATH, and the secret access key from --from-env, --from-file, --from-exec or --stdin (or --from-aws-profile NAME)")
	case len(secretFlags) != 1:
		return b, usagef("--kind aws_sigv4 needs the secret access key from exactly one of --from-env VAR, --from-file PATH, --from-exec 'CMD' or --stdin")
	case len(tokenFlags) > 1:
		return b, usagef("pass only one of %s", strings.Join(tokenFlags, " and "))
	}
	var err error
	if b.Source, err = credentialSource(a, secretFlags[0], sf.fromEnv, sf.fromFile, sf.fromExec, "secret access key"); err != nil {
		return b, err
	}
	if aws.AccessKeyID, err = credentialSource(a, strings.Replace(keyFlags[0], "access-key-id-", "", 1), f.keyIDEnv, f.keyIDFile, "", "access key id"); err != nil {
		return b, err
	}
	if len(tokenFlags) == 1 {
		if aws.SessionToken, err = credentialSource(a, strings.Replace(tokenFlags[0], "session-token-", "", 1), f.tokenEnv, f.tokenFile, "", "session token"); err != nil {
			return b, err
		}
	}
	return b, validated(b)
}

func validated(b credentials.Binding) error {
	if err := b.Validate(); err != nil {
		return usageError(fmt.Errorf("invalid credential for %s: %w", b.FQN, err))
	}
	return nil
}
