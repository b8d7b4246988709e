package kubernetes

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const deployDoc = "../../docs/deploy.md"

// sandboxTemplate mirrors the fields of agent-sandbox's SandboxTemplate
// (extensions.agents.x-k8s.io/v1beta1) that docs/deploy.md may use, with
// their JSON names as the project defines them in
// kubernetes-sigs/agent-sandbox extensions/api/v1beta1/sandboxtemplate_types.go
// and api/v1beta1/sandbox_types.go (SandboxBlueprint, PodTemplate, PodMetadata)
// at commit 2fd412d55ecae90861a101a5424a75473de97c36. The rules and the pod
// spec are the Kubernetes types that project embeds, so the sketch in the
// docs is checked as strictly as the manifests.
type sandboxTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		PodTemplate struct {
			Metadata struct {
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"metadata"`
			Spec corev1.PodSpec `json:"spec"`
		} `json:"podTemplate"`
		Service       *bool `json:"service,omitempty"`
		NetworkPolicy *struct {
			Ingress []networkingv1.NetworkPolicyIngressRule `json:"ingress,omitempty"`
			Egress  []networkingv1.NetworkPolicyEgressRule  `json:"egress,omitempty"`
		} `json:"networkPolicy,omitempty"`
		NetworkPolicyManagement    string `json:"networkPolicyManagement,omitempty"`
		EnvVarsInjectionPolicy     string `json:"envVarsInjectionPolicy,omitempty"`
		VolumeClaimTemplatesPolicy string `json:"volumeClaimTemplatesPolicy,omitempty"`
	} `json:"spec"`
}

// decodeStrictYAML decodes YAML into v refusing unknown, duplicate and
// wrongly cased fields, as the API server's strict validation does.
func decodeStrictYAML(data []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	strict, err := sigsjson.UnmarshalStrict(j, v)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		return fmt.Errorf("strict decoding: %v", strict)
	}
	return nil
}

// yamlBlocks returns the ```yaml blocks of a markdown file.
func yamlBlocks(t *testing.T, path string) []string {
	t.Helper()
	var out []string
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(readFile(t, path), -1) {
		out = append(out, m[1])
	}
	return out
}

// TestDocsSandboxTemplate decodes the SandboxTemplate sketched in
// docs/deploy.md strictly and checks that its network policy admits no
// traffic in and lets its sandboxes reach the serve pods, on serve's
// ports, and nothing else; and that its pods carry the label serve's
// NetworkPolicy admits.
func TestDocsSandboxTemplate(t *testing.T) {
	var blocks []string
	for _, b := range yamlBlocks(t, deployDoc) {
		if strings.Contains(b, "kind: SandboxTemplate") {
			blocks = append(blocks, b)
		}
	}
	if len(blocks) != 1 {
		t.Fatalf("%s has %d SandboxTemplate blocks, want 1", deployDoc, len(blocks))
	}
	var st sandboxTemplate
	if err := decodeStrictYAML([]byte(blocks[0]), &st); err != nil {
		t.Fatalf("the SandboxTemplate in %s: %v", deployDoc, err)
	}
	if st.APIVersion != "extensions.agents.x-k8s.io/v1beta1" {
		t.Errorf("SandboxTemplate apiVersion %q, want extensions.agents.x-k8s.io/v1beta1", st.APIVersion)
	}

	d := loadDeployment(t)
	if len(d.np.Spec.Ingress) == 0 || len(d.np.Spec.Ingress[0].From) == 0 || d.np.Spec.Ingress[0].From[0].PodSelector == nil {
		t.Fatal("serve's NetworkPolicy names no sandbox pods")
	}
	if !matches(d.np.Spec.Ingress[0].From[0].PodSelector.MatchLabels, st.Spec.PodTemplate.Metadata.Labels) {
		t.Errorf("the template's pods are labelled %v, which serve's NetworkPolicy does not admit", st.Spec.PodTemplate.Metadata.Labels)
	}
	if ns := d.np.Spec.Ingress[0].From[0].NamespaceSelector; ns == nil || ns.MatchLabels["kubernetes.io/metadata.name"] != st.Namespace {
		t.Errorf("the template is in namespace %q, which serve's NetworkPolicy does not admit", st.Namespace)
	}
	if st.Spec.PodTemplate.Spec.AutomountServiceAccountToken == nil || *st.Spec.PodTemplate.Spec.AutomountServiceAccountToken {
		t.Error("the template's pods must not mount a service account token")
	}

	np := st.Spec.NetworkPolicy
	if np == nil || st.Spec.NetworkPolicyManagement != "Managed" {
		t.Fatal("the template must give its own networkPolicy, Managed: the controller's default allows the internet")
	}
	if len(np.Ingress) != 0 {
		t.Errorf("the template admits traffic in (%d ingress rules); a sandbox is reached by nothing", len(np.Ingress))
	}
	if len(np.Egress) == 0 {
		t.Fatal("the template's sandboxes could reach nothing, not even serve")
	}
	reached := map[int32]bool{}
	for i, r := range np.Egress {
		if len(r.To) == 0 || len(r.Ports) == 0 {
			t.Errorf("egress rule %d allows every destination or every port", i)
		}
		for _, peer := range r.To {
			if peer.IPBlock != nil || peer.PodSelector == nil || !matches(peer.PodSelector.MatchLabels, d.sts.Spec.Template.Labels) ||
				peer.NamespaceSelector == nil || peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != d.sts.Namespace {
				t.Errorf("egress rule %d reaches %+v; only the serve pods", i, peer)
			}
		}
		for _, p := range r.Ports {
			if p.Port == nil {
				t.Errorf("egress rule %d has a port entry without a port", i)
				continue
			}
			proto := corev1.ProtocolTCP
			if p.Protocol != nil {
				proto = *p.Protocol
			}
			cp, ok := containerPort(d.serve, *p.Port)
			if !ok || proto != protocol(cp.Protocol) {
				t.Errorf("egress rule %d allows port %s, which is no port of serve's", i, p.Port.String())
				continue
			}
			reached[cp.ContainerPort] = true
		}
	}
	for _, cp := range d.serve.Ports {
		if !reached[cp.ContainerPort] {
			t.Errorf("the template's sandboxes cannot reach serve's port %s (%d)", cp.Name, cp.ContainerPort)
		}
	}
}
