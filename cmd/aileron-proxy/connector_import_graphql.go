package main

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/aileron-dev/aileron-proxy/graphqlimport"
	"github.com/aileron-dev/aileron-proxy/internal/cappedfile"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// maxGraphQLSchema bounds a schema file `connector import --graphql` reads.
const maxGraphQLSchema = 64 << 20

// graphQLImportFlags are the flags of `connector import --graphql`.
type graphQLImportFlags struct {
	schema string
	path   string
}

// addGraphQLImportFlags registers the --graphql flags of connector import.
func addGraphQLImportFlags(fl *pflag.FlagSet, g *graphQLImportFlags) {
	fl.StringVar(&g.schema, "graphql", "", "draft from a GraphQL schema (SDL) `FILE` instead: one operation per Query and Mutation field, on --host and --path; mutations require approval")
	fl.StringVar(&g.path, "path", "/graphql", "with --graphql: the endpoint's `PATH`")
}

// runGraphQLImport drafts a spec from a GraphQL schema file.
func runGraphQLImport(a *app, f *connImportFlags) error {
	g := &f.gql
	switch {
	case f.openapi != "":
		return usageError(errors.New("--openapi and --graphql are exclusive; pick one"))
	case f.fqn == "":
		return usageError(errors.New("--fqn is required, e.g. --fqn github://acme/aileron-connector-github"))
	case len(f.hosts) != 1:
		return usageError(errors.New("--graphql needs exactly one --host, the GraphQL endpoint's host, e.g. --host api.github.com"))
	case f.output != "" && f.install:
		return usageError(errors.New("-o and --install are exclusive; pick one"))
	case f.diff:
		return usageError(errors.New("--diff is for --openapi imports; write the draft with -o and compare it"))
	case len(f.include)+len(f.exclude)+len(f.tags)+len(f.opIDs)+len(f.serverVars)+len(f.approvalFor) > 0:
		return usageError(errors.New("--include, --exclude, --tag, --operation-id, --server-var and --approval-for are for --openapi imports"))
	}
	sdl, err := cappedfile.Read(g.schema, maxGraphQLSchema)
	if err != nil {
		return fmt.Errorf("reading --graphql %s: %w", g.schema, err)
	}
	res, err := graphqlimport.Import(sdl, graphqlimport.Options{FQN: f.fqn, Version: f.version, Tool: f.tool,
		Host: f.hosts[0], Path: g.path, Credential: policy.CredentialKind(f.credential)})
	if err != nil {
		return fmt.Errorf("importing %s: %w; nothing was written", g.schema, err)
	}
	if err := writeDraft(a, res.JSON, f.output, f.install); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "drafted %s and %s (%s left out); mutations require approval: review the spec before installing it\n",
		connPlural(res.Queries, "query operation"), connPlural(res.Mutations, "mutation operation"), connPlural(res.Subscriptions, "subscription field"))
	return nil
}
