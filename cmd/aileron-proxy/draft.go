package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/aileron-dev/aileron-proxy/internal/atomicfile"
	"github.com/aileron-dev/aileron-proxy/learn"
	"github.com/aileron-dev/aileron-proxy/openapiimport"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// newConnectorDraftCmd is `connector draft`: a connector spec from a learn
// session's record.
func newConnectorDraftCmd(a *app) *cobra.Command {
	var (
		sessionRef, fqn, version, out, approvalFor string
		install, keep                              bool
		openapi                                    []string
	)
	cmd := &cobra.Command{
		Use:   "draft --session ID|LAST --fqn FQN [--openapi FILE|URL]... [--approval-for METHODS] [--version V] [-o FILE | --install] [--keep]",
		Short: "Draft a connector spec from what a learn session recorded",
		Long: `Turn the learn record of a learn session (launch --learn, session create --learn)
into one aileron.connector.v1 spec of exactly the requests the agent made.

Requests group by host, method and path shape. A path position becomes a
template when it varies with values that look like identifiers (numbers,
UUIDs, long hex or base64url strings), or with three or more distinct words
under a fixed parent; it is named from the segment before it (/items/17 and
/items/42 give /items/{item}). Shapes that return different content types or
status classes stay apart. Query parameters and JSON body keys become inputs,
typed from what was seen and required when always present. The credential is
inferred from what the client sent (Authorization: Bearer, Basic, X-Api-Key
and similar headers). git over smart HTTP is drafted as git.info-refs and
git.upload-pack (clone, fetch), and git.receive-pack (push, approval required).
Operations whose method is in --approval-for (default POST,PUT,PATCH,DELETE;
"none" for none) get approval: required.

--openapi names a description of the API (OpenAPI 2.0, 3.0 or 3.1, read as
connector import reads it; repeatable). A learned request that one of its
operations matches (method, host, path template) is drafted as that
operation, with the document's operationId, template names, inputs and
description, instead of being inferred; only operations actually called are
drafted. A description without a usable https server matches any host.

The spec goes to stdout, to -o FILE, or into the store with --install. A review
table (operations, requests covered, example path with template names,
statuses) and the requests that could not be placed go to stderr, with the
` + "`credential set`" + ` command to pair with the draft. Only names, templates and counts
are printed: no header, query or body value.

--session LAST is the most recent learn session. The learn record
($AILERON_HOME/learn/<session>.jsonl) is removed after a successful draft
unless --keep is given. Exit status: 0 drafted, 1 failure, 2 usage error.`,
		Example: `  aileron-proxy connector draft --session LAST --fqn local://me/learned-api --install
  aileron-proxy connector draft --session ses_0123456789abcdef01234567 --fqn github://acme/api -o api.aileron.connector.v1.json --keep
  aileron-proxy connector draft --session LAST --fqn local://me/api --approval-for DELETE
  aileron-proxy connector draft --session LAST --fqn local://me/petstore --openapi petstore.yaml`,
		Args:                  usageArgs(cobra.NoArgs),
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if sessionRef == "" || fqn == "" {
				return usageError(errors.New("--session and --fqn are required, e.g. --session LAST --fqn local://me/learned-api"))
			}
			if install && out != "" {
				return usageError(errors.New("-o and --install exclude each other; pick one"))
			}
			methods, err := parseApprovalFor(approvalFor)
			if err != nil {
				return usageError(err)
			}
			st, err := learn.OpenStore(a.home)
			if err != nil {
				return err
			}
			id, err := st.Resolve(sessionRef)
			if err != nil {
				return err
			}
			rec, err := st.Read(id)
			if err != nil {
				return err
			}
			var documented []policy.Operation
			for _, ref := range openapi {
				ops, err := draftDocumented(cmd.Context(), ref, fqn)
				if err != nil {
					return err
				}
				documented = append(documented, ops...)
			}
			res, err := learn.Draft(rec, learn.Options{FQN: fqn, Version: version, ApprovalFor: methods, Documented: documented})
			if err != nil {
				return err
			}
			data, err := res.JSON(nil)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "drafted %s from learn session %s (%d learned requests)\n\n", res.Spec.Connector.FQN, id, len(rec.Requests))
			if err := res.WriteReview(a.stderr); err != nil {
				return err
			}
			if err := writeDraft(a, data, out, install); err != nil {
				return err
			}
			if cmds := res.CredentialCommands(); len(cmds) > 0 {
				fmt.Fprintf(a.stderr, "\nThe clients sent credentials; pair the draft with:\n")
				for _, c := range cmds {
					fmt.Fprintf(a.stderr, "  %s\n", c)
				}
			}
			if keep {
				fmt.Fprintf(a.stderr, "\nkept the learn record %s\n", st.Path(id))
				return nil
			}
			if err := st.Remove(id); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "\nremoved the learn record of %s (use --keep to keep it)\n", id)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&sessionRef, "session", "", "learn session `ID`, or LAST for the most recent")
	f.StringVar(&fqn, "fqn", "", "`FQN` of the drafted connector, e.g. local://me/learned-api")
	f.StringVar(&version, "version", "", "connector `VERSION` (default 0.1.0)")
	f.StringVar(&approvalFor, "approval-for", strings.Join(learn.DefaultApprovalFor, ","), "comma-separated `METHODS` whose operations need approval, or none")
	f.StringVarP(&out, "output", "o", "", "write the spec to `FILE` instead of stdout")
	f.BoolVar(&install, "install", false, "install the draft into the store")
	f.BoolVar(&keep, "keep", false, "keep the learn record after drafting")
	f.StringArrayVar(&openapi, "openapi", nil, "an OpenAPI description (`FILE` or https:// URL) whose operations name what was learned (repeatable)")
	return cmd
}

// draftDocumented imports the description ref for connector draft: its
// operations, with the document's hosts, or with none (any host) when the
// document names no usable https host.
func draftDocumented(ctx context.Context, ref, fqn string) ([]policy.Operation, error) {
	src, err := readDescription(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("--openapi: %w", err)
	}
	opts := openapiimport.Options{FQN: fqn}
	res, err := openapiimport.Import(src, opts)
	anyHost := false
	if err != nil {
		// The import needs a host; a draft can match on method and path.
		opts.Hosts = []string{"any-host.invalid"}
		if r2, err2 := openapiimport.Import(src, opts); err2 == nil {
			res, err, anyHost = r2, nil, true
		}
	}
	if err != nil {
		return nil, fmt.Errorf("--openapi: %w", err)
	}
	var ops []policy.Operation
	for _, t := range res.Spec.Tools {
		for _, op := range t.Operations {
			if anyHost {
				op.Hosts = nil
			}
			ops = append(ops, op)
		}
	}
	return ops, nil
}

func parseApprovalFor(v string) ([]string, error) {
	v = strings.TrimSpace(v)
	if v == "" || strings.EqualFold(v, "none") {
		return []string{}, nil
	}
	var out []string
	for _, m := range strings.Split(v, ",") {
		m = strings.ToUpper(strings.TrimSpace(m))
		switch m {
		case "GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE":
			out = append(out, m)
		default:
			return nil, fmt.Errorf("--approval-for: %q is not an HTTP method; use a list such as POST,PUT,PATCH,DELETE, or none", m)
		}
	}
	return out, nil
}

// writeDraft sends the spec where the flags say: the store, a file or
// stdout.
func writeDraft(a *app, data []byte, out string, install bool) error {
	switch {
	case install:
		dir, err := os.MkdirTemp("", "aileron-draft-")
		if err != nil {
			return fmt.Errorf("staging the draft: %w", err)
		}
		defer os.RemoveAll(dir)
		p := filepath.Join(dir, policy.SpecFileName)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			return fmt.Errorf("staging the draft: %w", err)
		}
		st, err := policy.OpenStore(a.home)
		if err != nil {
			return err
		}
		inst, err := st.Install(p, policy.InstallOptions{})
		if err != nil {
			return fmt.Errorf("installing the draft (nothing was installed; write it with -o and review it): %w", err)
		}
		fmt.Fprintf(a.stdout, "installed %s %s %s\n", inst.Spec.Connector.FQN, connVersionLabel(inst.Spec.Connector.Version), inst.Hash)
		if !inst.IsActive() {
			fmt.Fprintf(a.stderr, "warning: %s is not active: %s\n", inst.Spec.Connector.FQN, inst.Status)
		}
		return nil
	case out != "":
		if err := atomicfile.WriteFile(out, data, 0o644); err != nil {
			return fmt.Errorf("writing the draft to %s: %w", out, err)
		}
		fmt.Fprintf(a.stderr, "\nwrote %s\n", out)
		return nil
	}
	_, err := a.stdout.Write(data)
	return err
}
