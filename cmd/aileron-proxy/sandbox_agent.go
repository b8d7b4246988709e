package main

import (
	"context"
	"fmt"

	"github.com/aileron-dev/aileron-proxy/credentials"
	"github.com/aileron-dev/aileron-proxy/launcher"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// checkAgentRecipe runs the checks of a known agent recipe against this
// home's connectors and credentials.
func (a *app) checkAgentRecipe(ctx context.Context, rt runtime.Runtime, plan *launcher.Plan, recipe launcher.Agent) ([]launcher.CheckResult, error) {
	st, err := policy.OpenStore(a.home)
	if err != nil {
		return nil, err
	}
	installed, err := st.List()
	if err != nil {
		return nil, fmt.Errorf("listing installed connectors: %w", err)
	}
	var fqns []string
	for _, in := range installed {
		if in.IsActive() && in.Spec != nil {
			fqns = append(fqns, in.Spec.Connector.FQN)
		}
	}
	creds, err := credentials.LoadFile(credentialStorePath(a))
	if err != nil {
		return nil, err
	}
	return launcher.CheckAgentRecipe(ctx, rt, plan.RunImage(), recipe, launcher.AgentHost{
		Connectors: fqns,
		HasCredential: func(fqn, kind string) bool {
			_, ok := creds.Get(fqn, credentials.Kind(kind))
			return ok
		},
		ContainerEnv: plan.ContainerEnv,
		Project:      plan.ProjectDir,
	})
}
