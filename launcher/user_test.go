package launcher

import (
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
	"strings"
	"testing"
)

func TestDecideUser(t *testing.T) {
	agent := ImageUser{Name: "agent", UID: 1000, GID: 1000}
	root := ImageUser{Name: "root"}
	for _, tc := range []struct {
		name             string
		ownerUID, ownerG int
		known            bool
		img              ImageUser
		requested        string
		update           bool
		want             AgentUser
		summary          string
	}{
		{"other owner: remap", 1234, 1234, true, agent, "", true, AgentUser{UID: 1234, GID: 1234, Remap: true}, "agent remapped to uid 1234, gid 1234"},
		{"other gid only: remap", 1000, 50, true, agent, "", true, AgentUser{UID: 1000, GID: 50, Remap: true}, "remapped to uid 1000, gid 50"},
		{"same owner: keep", 1000, 1000, true, agent, "", true, AgentUser{UID: 1000, GID: 1000}, "who owns the project"},
		{"update off: keep", 1234, 1234, true, agent, "agent", false, AgentUser{User: "agent", UID: 1000, GID: 1000}, "updateRemoteUserUID is false"},
		{"root owner: uid 0", 0, 0, true, agent, "agent", true, AgentUser{User: "0:0"}, "every capability is dropped"},
		{"root owner, update off: still uid 0", 0, 0, true, agent, "", false, AgentUser{User: "0:0"}, "owned by root"},
		{"root image user: not remapped", 1234, 1234, true, root, "", true, AgentUser{}, "root is not remapped"},
		{"owner unknown: keep", 0, 0, false, agent, "", true, AgentUser{UID: 1000, GID: 1000}, "the image's user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decideUser(tc.ownerUID, tc.ownerG, tc.known, tc.img, tc.requested, tc.update)
			sum := got.Summary
			got.Summary = ""
			if got != tc.want || !strings.Contains(sum, tc.summary) {
				t.Errorf("decideUser(%d:%d, %+v, %q, %v) = %+v %q, want %+v %q", tc.ownerUID, tc.ownerG, tc.img, tc.requested, tc.update, got, sum, tc.want, tc.summary)
			}
		})
	}
}

func TestPlanUserSettings(t *testing.T) {
	dir := writeProject(t, map[string]string{devcontainer.Path: `{"image": "x", "containerUser": "c", "remoteUser": "r", "updateRemoteUserUID": false}`})
	p, err := NewPlan(dir, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.User != "r" || p.UpdateRemoteUserUID {
		t.Errorf("plan user = %q, update = %v; want remoteUser r and false", p.User, p.UpdateRemoteUserUID)
	}
	for _, w := range p.Warnings {
		if strings.Contains(w, "remoteUser") || strings.Contains(w, "updateRemoteUserUID") {
			t.Errorf("warning about an applied key: %s", w)
		}
	}
	dir = writeProject(t, map[string]string{devcontainer.Path: `{"image": "x", "containerUser": "c"}`})
	if p, err := NewPlan(dir, PlanOptions{}); err != nil || p.User != "c" || !p.UpdateRemoteUserUID {
		t.Errorf("NewPlan(containerUser) = %+v, %v; want user c, update on", p, err)
	}
	dir = writeProject(t, map[string]string{devcontainer.Path: `{"image": "x", "updateRemoteUserUID": "no"}`})
	if _, err := NewPlan(dir, PlanOptions{}); err == nil || !strings.Contains(err.Error(), "updateRemoteUserUID: must be true or false, not a string") {
		t.Errorf("NewPlan(updateRemoteUserUID string) err = %v", err)
	}
}
