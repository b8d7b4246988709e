package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/aileron-dev/aileron-proxy/internal/atomicfile"
	"github.com/aileron-dev/aileron-proxy/openapiimport"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// connImportFlags holds `connector import` flags.
type connImportFlags struct {
	openapi     string
	fqn         string
	version     string
	tool        string
	hosts       []string
	serverVars  []string
	include     []string
	exclude     []string
	tags        []string
	opIDs       []string
	credential  string
	approvalFor []string
	output      string
	install     bool
	diff        bool
	force       bool
	update      string
	gql         graphQLImportFlags // connector_import_graphql.go
}

func newConnectorImportCmd(a *app) *cobra.Command {
	f := &connImportFlags{}
	cmd := &cobra.Command{
		Use:   "import --openapi FILE|URL (--fqn FQN | --update SPEC) [flags]",
		Short: "Make a connector spec from an OpenAPI description",
		Long: `Make an aileron.connector.v1 spec from an OpenAPI description (Swagger 2.0,
OpenAPI 3.0 or 3.1, JSON or YAML): one operation per documented operation,
with its hosts, path template, inputs, idempotency, approval and credential
kind. docs/import.md lists every mapping rule and the x-aileron-* extensions.

--openapi is a file (its $refs may name other local files) or an https:// URL
(fetched directly, not through the proxy; it must then be self-contained). A
$ref to a remote URL is refused: an import reads nothing but what it is given.

--include and --exclude take 'METHOD PATHGLOB' ('GET /repos/**', '* /user'),
where * matches within a path segment and ** across segments; --tag and
--operation-id (a glob) select by the document's tags and operationIds. An
operation is imported when any --include, --tag or --operation-id selects it
(or none is given) and no --exclude matches it.

The spec goes to stdout, to -o FILE, or into the store with --install. The
output is deterministic: operations in path, then method order. --diff prints
what would change against the installed version of the FQN (+ added,
- removed, ~ changed) and writes nothing. What the spec cannot express
(header and cookie parameters, non-JSON bodies, skipped operations) and the
credential set command for each security scheme are printed to stderr.

--update SPEC re-imports onto an existing spec of the connector (a file or
package directory): an imported operation on the route (method, path with
any template names, a common host) of one of its operations keeps that
operation's name and the fields a person sets (summary, description,
idempotency, credential, audit; approval stays required if either side
requires it); its operations the document does not describe and its other
tools are kept unchanged; its FQN, version and tool name are the defaults.
Write the result over SPEC with -o SPEC.

Exit status: 0 imported, 1 unreadable document, bad $ref, no operations or
invalid result (nothing is written or installed), 2 usage error.`,
		Example: `  aileron-proxy connector import --openapi api.github.com.json --fqn github://acme/github --tool gh-api --include 'GET /repos/**' -o github.json
  aileron-proxy connector import --openapi ./swagger.json --fqn local://me/k8s --host k8s.internal:6443 --credential bearer --install
  aileron-proxy connector import --openapi https://example.com/openapi.yaml --update api.json -o api.json`,
		Args:                  usageArgs(cobra.NoArgs),
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runConnectorImport(cmd.Context(), a, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.openapi, "openapi", "", "the description: a `FILE` or an https:// URL (required)")
	fl.StringVar(&f.fqn, "fqn", "", "the connector's `FQN`, e.g. github://acme/aileron-connector-github (required)")
	fl.StringVar(&f.version, "version", "", "connector `VERSION` (default: the document's info.version when it is a semantic version)")
	fl.StringVar(&f.tool, "tool", "", "tool `NAME` (default: the FQN's repository without aileron-connector-)")
	fl.StringArrayVar(&f.hosts, "host", nil, "use `HOST[:PORT]` instead of the document's servers (repeatable)")
	fl.StringArrayVar(&f.serverVars, "server-var", nil, "set server variable `NAME=VALUE` (repeatable)")
	fl.StringArrayVar(&f.include, "include", nil, "import operations matching `'METHOD PATHGLOB'` (repeatable)")
	fl.StringArrayVar(&f.exclude, "exclude", nil, "leave out operations matching `'METHOD PATHGLOB'` (repeatable)")
	fl.StringArrayVar(&f.tags, "tag", nil, "import operations with `TAG` (repeatable)")
	fl.StringArrayVar(&f.opIDs, "operation-id", nil, "import operations whose operationId matches `GLOB` (repeatable)")
	fl.StringVar(&f.credential, "credential", "", "credential `KIND` of every operation: bearer, api_key, basic, oauth2 or none (default: from the document's security)")
	fl.StringArrayVar(&f.approvalFor, "approval-for", nil, "require approval for these `METHODS`, e.g. POST,PUT,PATCH,DELETE")
	fl.StringVarP(&f.output, "output", "o", "", "write the spec to `FILE` instead of stdout")
	fl.BoolVar(&f.install, "install", false, "install the spec into the store")
	fl.BoolVar(&f.force, "force", false, "with --install: install even if a tool command collides with another connector")
	fl.BoolVar(&f.diff, "diff", false, "print what would change against the installed version; write nothing")
	fl.StringVar(&f.update, "update", "", "update the existing spec `SPEC` of the connector: keep its operation names, hand-set fields and the operations the document does not describe")
	addGraphQLImportFlags(fl, &f.gql)
	return cmd
}

func runConnectorImport(ctx context.Context, a *app, f *connImportFlags) error {
	if f.gql.schema != "" {
		return runGraphQLImport(a, f)
	}
	switch {
	case f.openapi == "":
		return usageError(errors.New("--openapi FILE|URL is required"))
	case f.fqn == "" && f.update == "":
		return usageError(errors.New("--fqn is required (or --update SPEC), e.g. --fqn github://acme/aileron-connector-github"))
	case f.output != "" && f.install:
		return usageError(errors.New("-o and --install are exclusive; pick one"))
	case f.diff && (f.output != "" || f.install):
		return usageError(errors.New("--diff writes nothing; drop -o and --install"))
	}
	vars := map[string]string{}
	for _, sv := range f.serverVars {
		k, v, ok := strings.Cut(sv, "=")
		if !ok || k == "" {
			return usageError(fmt.Errorf("--server-var %q must be NAME=VALUE", sv))
		}
		vars[k] = v
	}
	var base *policy.Spec
	if f.update != "" {
		data, err := connReadSpec(f.update)
		if err != nil {
			return fmt.Errorf("--update %s: %w", f.update, err)
		}
		if base, _, err = policy.ParseSpec(data); err != nil {
			return fmt.Errorf("--update %s: %w; fix it first (aileron-proxy connector validate %s)", f.update, err, f.update)
		}
	}
	src, err := readDescription(ctx, f.openapi)
	if err != nil {
		return err
	}
	res, err := openapiimport.Import(src, openapiimport.Options{
		Update: base,
		FQN:    f.fqn, Version: f.version, Tool: f.tool, Hosts: f.hosts, ServerVars: vars,
		Include: f.include, Exclude: f.exclude, Tags: f.tags, OperationIDs: f.opIDs,
		Credential: policy.CredentialKind(f.credential), ApprovalFor: f.approvalFor,
	})
	if err != nil {
		// The importer's errors name the file (and where in it) already.
		return fmt.Errorf("%w; nothing was written", err)
	}
	if f.diff {
		if err := printImportDiff(a, res.Spec); err != nil {
			return err
		}
		printImportSummary(a.stderr, res)
		return nil
	}
	if tooBig := importTooBig(res); tooBig != "" {
		if f.install {
			return fmt.Errorf("%s; nothing was installed", tooBig)
		}
		fmt.Fprintf(a.stderr, "warning: %s; it cannot be installed as it is\n", tooBig)
	}
	switch {
	case f.install:
		dir, err := os.MkdirTemp("", "aileron-import-")
		if err != nil {
			return fmt.Errorf("installing the imported spec: %w", err)
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, policy.SpecFileName)
		if err := os.WriteFile(path, res.JSON, 0o600); err != nil {
			return fmt.Errorf("installing the imported spec: %w", err)
		}
		st, err := policy.OpenStore(a.home)
		if err != nil {
			return err
		}
		inst, err := st.Install(path, policy.InstallOptions{Force: f.force})
		if err != nil {
			return fmt.Errorf("installing the imported spec: %w; nothing was installed", err)
		}
		fmt.Fprintf(a.stdout, "installed %s %s %s\n", inst.Spec.Connector.FQN, connVersionLabel(inst.Spec.Connector.Version), inst.Hash)
		if !inst.IsActive() {
			fmt.Fprintf(a.stderr, "warning: %s is not active: %s\n", inst.Spec.Connector.FQN, inst.Status)
		}
	case f.output != "":
		if err := atomicfile.WriteFile(f.output, res.JSON, 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", f.output, err)
		}
	default:
		if _, err := a.stdout.Write(res.JSON); err != nil {
			return err
		}
	}
	printImportSummary(a.stderr, res)
	return nil
}

// importTooBig says why the imported spec is over the store's size limit
// and how to make it smaller, or returns "".
func importTooBig(res *openapiimport.Result) string {
	if len(res.JSON) <= policy.MaxSpecSize {
		return ""
	}
	ops := 0
	for _, t := range res.Spec.Tools {
		ops += len(t.Operations)
	}
	return fmt.Sprintf("the imported spec is %d bytes (%s), over the %d-byte (%d MiB) limit of a connector spec; import only the operations the agent needs with --include 'METHOD PATHGLOB', --tag or --operation-id (or leave some out with --exclude)",
		len(res.JSON), connPlural(ops, "operation"), policy.MaxSpecSize, policy.MaxSpecSize>>20)
}

// printImportDiff prints the changes against the installed version of the
// imported FQN.
func printImportDiff(a *app, spec *policy.Spec) error {
	st, err := policy.OpenStore(a.home)
	if err != nil {
		return err
	}
	entries, err := st.List()
	if err != nil {
		return err
	}
	var installed *policy.Spec
	for _, e := range entries {
		if e.Spec != nil && e.Spec.Connector.FQN == spec.Connector.FQN && (installed == nil || e.IsActive()) {
			installed = e.Spec
		}
	}
	if installed == nil {
		fmt.Fprintf(a.stderr, "%s is not installed; every operation would be added\n", spec.Connector.FQN)
	} else if installed.Connector.Version != spec.Connector.Version {
		fmt.Fprintf(a.stdout, "version %s -> %s\n", connVersionLabel(installed.Connector.Version), connVersionLabel(spec.Connector.Version))
	}
	changes := openapiimport.Diff(installed, spec)
	for _, c := range changes {
		fmt.Fprintln(a.stdout, c)
	}
	if len(changes) == 0 {
		fmt.Fprintln(a.stdout, "no operation changes")
	}
	return nil
}

// printImportSummary prints counts, what was skipped or not expressible,
// and the credential set commands.
func printImportSummary(w io.Writer, res *openapiimport.Result) {
	fmt.Fprintf(w, "imported %s of %d in the document (%d filtered out, %d skipped)\n",
		connPlural(res.Imported, "operation"), res.DocumentOperations, res.Filtered, len(res.Skipped))
	if len(res.Skipped) > 0 {
		fmt.Fprintln(w, "skipped:")
		for _, n := range res.Skipped {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
	if res.Matched > 0 || len(res.Carried) > 0 {
		fmt.Fprintf(w, "updated: names kept for %s, %s carried over\n", connPlural(res.Matched, "operation"), connPlural(len(res.Carried), "operation"))
	}
	if len(res.Carried) > 0 {
		fmt.Fprintln(w, "carried over from the updated spec (not in the document):")
		for _, n := range res.Carried {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
	if len(res.Notes) > 0 {
		fmt.Fprintln(w, "not expressed in the spec (the operations are imported):")
		for _, n := range res.Notes {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
	if len(res.Credentials) > 0 {
		fmt.Fprintln(w, "set the credential with:")
		for _, h := range res.Credentials {
			if h.Command != "" {
				fmt.Fprintf(w, "  %s\n", h.Command)
			}
			if h.Note != "" {
				fmt.Fprintf(w, "  # %s: %s\n", h.Scheme, h.Note)
			}
		}
	}
}

// importHTTPClient fetches an https:// description, trusting the system's
// roots (SSL_CERT_FILE and SSL_CERT_DIR name others). Tests trust their own
// server here.
var importHTTPClient = http.DefaultClient

// readDescription reads a file, or fetches an https:// URL directly.
func readDescription(ctx context.Context, ref string) (openapiimport.Source, error) {
	lower := strings.ToLower(ref)
	if strings.HasPrefix(lower, "http://") {
		return openapiimport.Source{}, usageError(fmt.Errorf("--openapi %q: only https:// URLs are fetched; use https or a local file", ref))
	}
	if !strings.HasPrefix(lower, "https://") {
		return openapiimport.ReadFile(ref)
	}
	u, err := url.Parse(ref)
	if err != nil {
		return openapiimport.Source{}, usageError(fmt.Errorf("--openapi %q: %w", ref, err))
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return openapiimport.Source{}, fmt.Errorf("fetching %s: %w", ref, err)
	}
	resp, err := importHTTPClient.Do(req)
	if err != nil {
		return openapiimport.Source{}, fmt.Errorf("fetching %s: %w", ref, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return openapiimport.Source{}, fmt.Errorf("fetching %s: %s", ref, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, openapiimport.MaxDocumentSize+1))
	if err != nil {
		return openapiimport.Source{}, fmt.Errorf("fetching %s: %w", ref, err)
	}
	if len(data) > openapiimport.MaxDocumentSize {
		return openapiimport.Source{}, errors.New("fetching " + ref + ": the description is over the size limit")
	}
	return openapiimport.Source{Data: data, Name: ref}, nil
}
