package specs

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Synthetic returns a valid aileron.connector.v1 document whose one tool has
// ops operations shaped like a large REST API (GitHub's): resource
// collections under a few templated prefixes, each with list, create, get,
// update, delete and list-comments operations, so that many templates share
// their shape and differ only in a literal. Names are "<group>.<verb>-<resource>"
// (e.g. "repos.get-issues"), so grouping by the prefix before the first '.'
// gives one group per path prefix. The document is deterministic: the same
// arguments give the same bytes, and the first operations of a bigger
// document are those of a smaller one.
//
// The first five operations are always, on host:
//
//	GET    /repos/{owner}/{repo}/issues
//	POST   /repos/{owner}/{repo}/issues
//	GET    /repos/{owner}/{repo}/issues/{issues_id}
//	PATCH  /repos/{owner}/{repo}/issues/{issues_id}
//	DELETE /repos/{owner}/{repo}/issues/{issues_id}
func Synthetic(fqn, tool, host string, ops int) []byte {
	type input struct {
		Name     string `json:"name"`
		Type     string `json:"type,omitempty"`
		Required bool   `json:"required,omitempty"`
	}
	type op struct {
		Name        string   `json:"name"`
		Summary     string   `json:"summary"`
		Method      string   `json:"method"`
		Path        string   `json:"path"`
		Hosts       []string `json:"hosts"`
		Idempotency string   `json:"idempotency"`
		Credential  string   `json:"credential"`
		Inputs      []input  `json:"inputs,omitempty"`
	}
	groups := []struct {
		name   string
		prefix string
		params []string
	}{
		{"repos", "/repos/{owner}/{repo}", []string{"owner", "repo"}},
		{"orgs", "/orgs/{org}", []string{"org"}},
		{"users", "/users/{username}", []string{"username"}},
		{"teams", "/orgs/{org}/teams/{team_slug}", []string{"org", "team_slug"}},
		{"enterprises", "/enterprises/{enterprise}", []string{"enterprise"}},
		{"apps", "/apps/{app_slug}", []string{"app_slug"}},
	}
	nouns := []string{"issues", "pulls", "commits", "branches", "hooks", "releases", "labels",
		"milestones", "deployments", "environments", "secrets", "variables", "runners",
		"artifacts", "caches", "projects", "packages", "invitations", "collaborators",
		"rulesets", "codespaces", "alerts", "autolinks", "keys", "pages", "forks"}
	verbs := []struct{ verb, method, idem, tail string }{
		{"list", "GET", "idempotent", ""},
		{"create", "POST", "not_idempotent", ""},
		{"get", "GET", "idempotent", "/{%s}"},
		{"update", "PATCH", "not_idempotent", "/{%s}"},
		{"delete", "DELETE", "idempotent", "/{%s}"},
		{"list-comments", "GET", "idempotent", "/{%s}/comments"},
	}
	out := make([]op, 0, ops)
	for i := 0; len(out) < ops; i++ {
		noun := nouns[(i/len(groups))%len(nouns)]
		if round := i / (len(groups) * len(nouns)); round > 0 {
			noun = fmt.Sprintf("%s-%d", noun, round+1)
		}
		g := groups[i%len(groups)]
		id := strings.ReplaceAll(noun, "-", "_") + "_id"
		for _, v := range verbs {
			if len(out) == ops {
				break
			}
			o := op{
				Name:        g.name + "." + v.verb + "-" + noun,
				Summary:     strings.ReplaceAll(v.verb, "-", " ") + " " + noun + " of " + g.name,
				Method:      v.method,
				Path:        g.prefix + "/" + noun,
				Hosts:       []string{host},
				Idempotency: v.idem,
				Credential:  "bearer",
			}
			for _, p := range g.params {
				o.Inputs = append(o.Inputs, input{Name: p, Required: true})
			}
			if v.tail != "" {
				o.Path += fmt.Sprintf(v.tail, id)
				o.Inputs = append(o.Inputs, input{Name: id, Required: true})
			}
			if v.verb == "list" {
				o.Inputs = append(o.Inputs, input{Name: "per_page", Type: "integer"})
			}
			out = append(out, o)
		}
	}
	doc := map[string]any{
		"schema_version": "aileron.connector.v1",
		"connector":      map[string]string{"fqn": fqn, "version": "1.0.0"},
		"tools":          []any{map[string]any{"name": tool, "description": "synthetic REST API", "operations": out}},
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic(err) // plain structs always marshal
	}
	return b
}
