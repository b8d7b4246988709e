package policy

import (
	"slices"
	"strings"
	"testing"
)

func TestSelectConnectors(t *testing.T) {
	conn := func(fqn string) Connector {
		return Connector{Spec: &Spec{Connector: ConnectorMeta{FQN: fqn}}}
	}
	active := []Connector{conn("local://b"), conn("local://a"), {}}
	for _, tc := range []struct {
		name    string
		active  []Connector
		fqns    []string
		want    []string
		wantErr []string
	}{
		{name: "all when none named", active: active, want: []string{"local://b", "local://a", ""}},
		{name: "named order, repeats dropped", active: active, fqns: []string{"local://a", "local://b", "local://a"}, want: []string{"local://a", "local://b"}},
		{
			name: "one unknown", active: active, fqns: []string{"local://a", "local://x"},
			wantErr: []string{`"local://x" is not an active installed connector`, "active connectors: local://a, local://b"},
		},
		{
			name: "every unknown at once", active: active, fqns: []string{"local://x", "local://y", "local://x"},
			wantErr: []string{`"local://x", "local://y" are not active installed connectors`},
		},
		{
			name: "none installed", fqns: []string{"local://x"},
			wantErr: []string{`"aileron-proxy connector install PATH"`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SelectConnectors(tc.active, tc.fqns)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("SelectConnectors(%q) = %d connectors, want an error", tc.fqns, len(got))
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("SelectConnectors(%q) error = %q, want it to contain %q", tc.fqns, err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("SelectConnectors(%q): %v", tc.fqns, err)
			}
			var names []string
			for _, c := range got {
				fqn := ""
				if c.Spec != nil {
					fqn = c.Spec.Connector.FQN
				}
				names = append(names, fqn)
			}
			if !slices.Equal(names, tc.want) {
				t.Errorf("SelectConnectors(%q) = %q, want %q", tc.fqns, names, tc.want)
			}
		})
	}
}
