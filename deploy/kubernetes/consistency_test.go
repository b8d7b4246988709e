package kubernetes

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/aileron-dev/aileron-proxy/credentials"
)

// The repository files the manifests must agree with.
const (
	dockerfile = "../../Dockerfile"
	serveHelp  = "../../cmd/aileron-proxy/testdata/serve-help.golden"
	apiRoutes  = "../../api/server.go"
)

// fileFlags are serve's flags whose value is a file serve reads.
var fileFlags = []string{"state-key-file", "config", "upstream-ca", "upstream-proxy-password-from-file"}

// deployment is what the checks look at.
type deployment struct {
	sts     *appsv1.StatefulSet
	svc     *corev1.Service
	np      *networkingv1.NetworkPolicy
	serve   corev1.Container
	secrets map[string]*corev1.Secret
	files   map[string]string // Secret name → manifest file
}

func loadDeployment(t *testing.T) deployment {
	t.Helper()
	ms := loadManifests(t)
	d := deployment{
		sts:     only[*appsv1.StatefulSet](t, ms),
		svc:     only[*corev1.Service](t, ms),
		np:      only[*networkingv1.NetworkPolicy](t, ms),
		secrets: map[string]*corev1.Secret{},
		files:   map[string]string{},
	}
	for _, m := range ms {
		if s, ok := m.obj.(*corev1.Secret); ok {
			d.secrets[s.Name], d.files[s.Name] = s, m.file
		}
	}
	i := slices.IndexFunc(d.sts.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == "serve" })
	if i < 0 {
		t.Fatal("the StatefulSet has no container named serve")
	}
	d.serve = d.sts.Spec.Template.Spec.Containers[i]
	return d
}

// containerPort resolves a Service target port or a NetworkPolicy port
// (a name or a number) to a port of c.
func containerPort(c corev1.Container, p intstr.IntOrString) (corev1.ContainerPort, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp, true
		}
	}
	return corev1.ContainerPort{}, false
}

func protocol(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

// matches reports whether every selector label is among labels.
func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

// flags parses serve's container args: "serve", then --name=value only.
func flags(t *testing.T, c corev1.Container) map[string]string {
	t.Helper()
	if len(c.Args) == 0 || c.Args[0] != "serve" || len(c.Command) != 0 {
		t.Fatalf("container %s: args %q, command %q; want the image's entrypoint with args starting with serve", c.Name, c.Args, c.Command)
	}
	out := map[string]string{}
	for _, a := range c.Args[1:] {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Errorf("container %s: argument %q: write flags as --name=value", c.Name, a)
			continue
		}
		out[name] = value
	}
	return out
}

// mountFor returns the volume mount of c holding path.
func mountFor(c corev1.Container, path string) (corev1.VolumeMount, bool) {
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			return m, true
		}
	}
	return corev1.VolumeMount{}, false
}

func volume(spec corev1.PodSpec, name string) (corev1.Volume, bool) {
	i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == name })
	if i < 0 {
		return corev1.Volume{}, false
	}
	return spec.Volumes[i], true
}

func envOf(c corev1.Container, name string) (corev1.EnvVar, bool) {
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
	if i < 0 {
		return corev1.EnvVar{}, false
	}
	return c.Env[i], true
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestServiceTargetsServePorts checks that the Service selects the serve pods
// and that each of its target ports is a port of the serve container, and
// each of those ports is exposed.
func TestServiceTargetsServePorts(t *testing.T) {
	d := loadDeployment(t)
	if !matches(d.svc.Spec.Selector, d.sts.Spec.Template.Labels) {
		t.Errorf("Service %s selects %v, which the pod template's labels %v do not carry", d.svc.Name, d.svc.Spec.Selector, d.sts.Spec.Template.Labels)
	}
	if !matches(d.sts.Spec.Selector.MatchLabels, d.sts.Spec.Template.Labels) {
		t.Errorf("the StatefulSet's selector %v does not match its pod template's labels %v", d.sts.Spec.Selector.MatchLabels, d.sts.Spec.Template.Labels)
	}
	exposed := map[int32]bool{}
	for _, p := range d.svc.Spec.Ports {
		cp, ok := containerPort(d.serve, p.TargetPort)
		if !ok {
			t.Errorf("Service port %s targets %s, which is no port of the serve container", p.Name, p.TargetPort.String())
			continue
		}
		if protocol(p.Protocol) != protocol(cp.Protocol) {
			t.Errorf("Service port %s is %s, the container port %s", p.Name, protocol(p.Protocol), protocol(cp.Protocol))
		}
		exposed[cp.ContainerPort] = true
	}
	for _, cp := range d.serve.Ports {
		if !exposed[cp.ContainerPort] {
			t.Errorf("container port %s (%d) is not exposed by Service %s", cp.Name, cp.ContainerPort, d.svc.Name)
		}
	}
}

// TestServeFlags checks serve's arguments against serve's own flags, the
// container's ports and mounts, and the Service.
func TestServeFlags(t *testing.T) {
	d := loadDeployment(t)
	f := flags(t, d.serve)
	help := readFile(t, serveHelp)
	for name := range f {
		if strings.Contains(help, "--"+name+" ") {
			continue
		}
		t.Errorf("serve.yaml passes --%s, which `aileron-proxy serve --help` does not list", name)
	}

	// $(VAR) in the arguments must be defined in the container's env.
	for _, a := range d.serve.Args {
		for _, m := range regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).FindAllStringSubmatch(a, -1) {
			if _, ok := envOf(d.serve, m[1]); !ok {
				t.Errorf("argument %q refers to $(%s), which the serve container's env does not define (Kubernetes would pass it literally)", a, m[1])
			}
		}
	}

	// Listeners: on every interface, on the container's named ports.
	for flag, portName := range map[string]string{"proxy-listen": "proxy", "api-listen": "api"} {
		host, port, err := net.SplitHostPort(f[flag])
		if err != nil {
			t.Errorf("--%s=%q: %v", flag, f[flag], err)
			continue
		}
		if host != "0.0.0.0" {
			t.Errorf("--%s=%q: listen on 0.0.0.0, or other pods cannot reach it", flag, f[flag])
		}
		cp, ok := containerPort(d.serve, intstr.FromString(portName))
		if !ok || strconv.Itoa(int(cp.ContainerPort)) != port {
			t.Errorf("--%s=%q, but the container port named %s is %d", flag, f[flag], portName, cp.ContainerPort)
		}
	}

	// Session proxy URLs name the Service, on the port that reaches the proxy.
	proxyPort, _ := containerPort(d.serve, intstr.FromString("proxy"))
	var svcPort int32
	for _, p := range d.svc.Spec.Ports {
		if cp, ok := containerPort(d.serve, p.TargetPort); ok && cp.ContainerPort == proxyPort.ContainerPort {
			svcPort = p.Port
		}
	}
	want := fmt.Sprintf("%s.%s.svc.cluster.local:%d", d.svc.Name, d.svc.Namespace, svcPort)
	if f["advertise-proxy-addr"] != want {
		t.Errorf("--advertise-proxy-addr=%q, want %q (the Service's name and its proxy port)", f["advertise-proxy-addr"], want)
	}

	// The replica is named after its pod.
	if f["replica"] != "$(POD_NAME)" {
		t.Errorf("--replica=%q, want $(POD_NAME)", f["replica"])
	}
	if e, ok := envOf(d.serve, "POD_NAME"); !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("POD_NAME must come from the downward API's metadata.name, got %+v", e)
	}

	// Postgres: the URL carries no password; PGPASSWORD comes from a Secret.
	u, err := url.Parse(f["state"])
	if err != nil || u.Scheme != "postgres" {
		t.Errorf("--state=%q: want a postgres:// URL (%v)", f["state"], err)
	} else if _, set := u.User.Password(); set {
		t.Errorf("--state carries a password; it would be in argv: leave it out and set PGPASSWORD from a Secret")
	}
	if e, ok := envOf(d.serve, "PGPASSWORD"); !ok || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		t.Errorf("PGPASSWORD must come from a secretKeyRef, got %+v", e)
	}

	// Files serve reads are on a volume; an emptyDir one is filled by an
	// init container that mounts it at the same place.
	spec := d.sts.Spec.Template.Spec
	for _, name := range fileFlags {
		path, ok := f[name]
		if !ok {
			continue
		}
		m, ok := mountFor(d.serve, path)
		if !ok {
			t.Errorf("--%s=%q is on no volume of the serve container", name, path)
			continue
		}
		v, _ := volume(spec, m.Name)
		switch {
		case v.Secret != nil:
			key := strings.TrimPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")
			if s, ok := d.secrets[v.Secret.SecretName]; !ok {
				t.Errorf("--%s=%q is in Secret %s, which inputs.example.yaml does not describe", name, path, v.Secret.SecretName)
			} else if _, ok := s.StringData[key]; !ok {
				t.Errorf("--%s=%q names key %q, which Secret %s does not have", name, path, key, s.Name)
			}
		case v.EmptyDir != nil:
			filled := slices.ContainsFunc(spec.InitContainers, func(c corev1.Container) bool {
				im, ok := mountFor(c, path)
				return ok && im.Name == m.Name && im.MountPath == m.MountPath && strings.Contains(strings.Join(c.Command, " "), path)
			})
			if !filled {
				t.Errorf("--%s=%q is on emptyDir volume %s, which no init container writes that file into", name, path, m.Name)
			}
		default:
			t.Errorf("--%s=%q is on volume %s, which is neither a Secret nor filled by an init container", name, path, m.Name)
		}
	}
	if _, ok := f["state-key-file"]; !ok {
		t.Error("serve has no --state-key-file: replicas sharing Postgres must be given the same key")
	}
}

// dockerfileFacts reads the image's home, user and ports.
func dockerfileFacts(t *testing.T) (home string, uid int64, ports []int32) {
	t.Helper()
	df := readFile(t, dockerfile)
	m := regexp.MustCompile(`(?m)^ENV AILERON_HOME=(\S+)$`).FindStringSubmatch(df)
	u := regexp.MustCompile(`useradd [^\n]*--uid (\d+)`).FindStringSubmatch(df)
	e := regexp.MustCompile(`(?m)^EXPOSE (.+)$`).FindStringSubmatch(df)
	if m == nil || u == nil || e == nil {
		t.Fatalf("%s: cannot find ENV AILERON_HOME, useradd --uid and EXPOSE; update this test with the Dockerfile", dockerfile)
	}
	uid, _ = strconv.ParseInt(u[1], 10, 64)
	for _, p := range strings.Fields(e[1]) {
		n, _ := strconv.Atoi(p)
		ports = append(ports, int32(n))
	}
	return m[1], uid, ports
}

// TestPodMatchesImageAndHardening checks the pod against the image the
// Dockerfile builds, and that it runs without privileges.
func TestPodMatchesImageAndHardening(t *testing.T) {
	d := loadDeployment(t)
	spec := d.sts.Spec.Template.Spec
	home, uid, ports := dockerfileFacts(t)
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != uid {
		t.Errorf("the pod must set runAsNonRoot and runAsUser %d (the image's user)", uid)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("serve never calls the Kubernetes API: set automountServiceAccountToken: false")
	}
	var got []int32
	for _, cp := range d.serve.Ports {
		got = append(got, cp.ContainerPort)
	}
	slices.Sort(got)
	slices.Sort(ports)
	if !slices.Equal(got, ports) {
		t.Errorf("serve's container ports are %v, the image exposes %v", got, ports)
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		if c.Image != d.serve.Image {
			t.Errorf("container %s runs %s, serve %s: one image for both", c.Name, c.Image, d.serve.Image)
		}
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("container %s: want readOnlyRootFilesystem, no privilege escalation and every capability dropped", c.Name)
		}
		if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("container %s: set memory requests and limits", c.Name)
		}
		e, ok := envOf(c, "AILERON_HOME")
		if !ok || e.Value != home {
			t.Errorf("container %s: AILERON_HOME must be %s, the image's", c.Name, home)
		}
		if m, ok := mountFor(c, home+"/x"); !ok || m.MountPath != home {
			t.Errorf("container %s: mount a volume at %s ($AILERON_HOME)", c.Name, home)
		}
	}
	if !slices.ContainsFunc(d.sts.Spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool {
		m, _ := mountFor(d.serve, home+"/x")
		return p.Name == m.Name
	}) {
		t.Errorf("$AILERON_HOME (the replica's audit log) must be on a volume claim that outlives the pod")
	}

	// Probes: on the serve container's ports, HTTP ones on a route the API has.
	routes := readFile(t, apiRoutes)
	for name, p := range map[string]*corev1.Probe{"startup": d.serve.StartupProbe, "readiness": d.serve.ReadinessProbe, "liveness": d.serve.LivenessProbe} {
		switch {
		case p == nil:
			t.Errorf("serve has no %s probe", name)
		case p.HTTPGet != nil:
			if _, ok := containerPort(d.serve, p.HTTPGet.Port); !ok {
				t.Errorf("%s probe: port %s is not serve's", name, p.HTTPGet.Port.String())
			}
			if !strings.Contains(routes, `{http.MethodGet, "`+p.HTTPGet.Path+`", authNone,`) {
				t.Errorf("%s probe: GET %s is not an unauthenticated route of the API (%s)", name, p.HTTPGet.Path, apiRoutes)
			}
		case p.TCPSocket != nil:
			if _, ok := containerPort(d.serve, p.TCPSocket.Port); !ok {
				t.Errorf("%s probe: port %s is not serve's", name, p.TCPSocket.Port.String())
			}
		default:
			t.Errorf("%s probe: want httpGet or tcpSocket", name)
		}
	}
}

// initPaths are the absolute paths an init container's script names, with
// its env variables substituted.
func initPaths(c corev1.Container) []string {
	script := strings.Join(c.Command[1:], " ")
	for _, e := range c.Env {
		script = strings.NewReplacer("${"+e.Name+"}", e.Value, "$"+e.Name, e.Value).Replace(script)
	}
	return regexp.MustCompile(`(?:^|[\s"'])(/[A-Za-z0-9._/*-]+)`).FindAllString(script, -1)
}

// TestInitContainerFiles checks that every file an init container names is
// on one of its volumes, and that a file read from a Secret is a key of it.
func TestInitContainerFiles(t *testing.T) {
	d := loadDeployment(t)
	spec := d.sts.Spec.Template.Spec
	if len(spec.InitContainers) == 0 {
		t.Fatal("no init container: who copies credentials.json into place at mode 0600?")
	}
	inputs := readFile(t, "inputs.example.yaml")
	for _, c := range spec.InitContainers {
		paths := initPaths(c)
		if len(paths) < 3 {
			t.Fatalf("init container %s names %d paths (%v); the check would pass vacuously", c.Name, len(paths), paths)
		}
		for _, p := range paths {
			p = strings.Trim(p, ` "'`)
			m, ok := mountFor(c, p)
			if !ok {
				t.Errorf("init container %s: %s is on none of its volumes (the root filesystem is read-only)", c.Name, p)
				continue
			}
			v, _ := volume(spec, m.Name)
			switch {
			case v.Secret != nil:
				key := strings.TrimPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/")
				s, ok := d.secrets[v.Secret.SecretName]
				if !ok {
					t.Errorf("init container %s reads Secret %s, which inputs.example.yaml does not describe", c.Name, v.Secret.SecretName)
				} else if _, ok := s.StringData[key]; !ok {
					t.Errorf("init container %s reads %s, but Secret %s has no key %q", c.Name, p, s.Name, key)
				}
			case v.ConfigMap != nil:
				if !strings.Contains(inputs, "create configmap "+v.ConfigMap.Name) {
					t.Errorf("ConfigMap %s is mounted, but inputs.example.yaml does not say how to create it", v.ConfigMap.Name)
				}
			}
		}
	}
}

// TestNetworkPolicyAdmitsOnlySandboxes checks that the policy covers the
// serve pods, admits only sandbox pods, and admits them on every port of
// serve's.
func TestNetworkPolicyAdmitsOnlySandboxes(t *testing.T) {
	d := loadDeployment(t)
	np := d.np
	if !matches(np.Spec.PodSelector.MatchLabels, d.sts.Spec.Template.Labels) {
		t.Errorf("NetworkPolicy %s selects %v, which the serve pods' labels %v do not carry", np.Name, np.Spec.PodSelector.MatchLabels, d.sts.Spec.Template.Labels)
	}
	if np.Namespace != d.sts.Namespace {
		t.Errorf("NetworkPolicy is in namespace %q, the StatefulSet in %q", np.Namespace, d.sts.Namespace)
	}
	for _, pt := range []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress} {
		if !slices.Contains(np.Spec.PolicyTypes, pt) {
			t.Errorf("NetworkPolicy policyTypes %v lacks %s", np.Spec.PolicyTypes, pt)
		}
	}
	admitted := map[int32]bool{}
	for i, r := range np.Spec.Ingress {
		if len(r.From) == 0 {
			t.Errorf("ingress rule %d admits every source; name the sandbox pods", i)
		}
		for _, peer := range r.From {
			if peer.IPBlock != nil || peer.PodSelector == nil || peer.PodSelector.MatchLabels["aileron.dev/sandbox"] != "true" {
				t.Errorf("ingress rule %d admits %+v; only pods labelled aileron.dev/sandbox: \"true\"", i, peer)
			}
		}
		if len(r.Ports) == 0 {
			t.Errorf("ingress rule %d admits every port", i)
		}
		for _, p := range r.Ports {
			if p.Port == nil {
				t.Errorf("ingress rule %d has a port entry without a port", i)
				continue
			}
			cp, ok := containerPort(d.serve, *p.Port)
			if !ok {
				t.Errorf("ingress rule %d admits port %s, which is no port of serve's", i, p.Port.String())
				continue
			}
			admitted[cp.ContainerPort] = true
		}
	}
	for _, cp := range d.serve.Ports {
		if !admitted[cp.ContainerPort] {
			t.Errorf("no ingress rule admits serve's port %s (%d): sandboxes could not reach it", cp.Name, cp.ContainerPort)
		}
	}
	// Egress reaches the database of --state and DNS.
	u, err := url.Parse(flags(t, d.serve)["state"])
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range []string{u.Port(), "53"} {
		if !slices.ContainsFunc(np.Spec.Egress, func(r networkingv1.NetworkPolicyEgressRule) bool {
			return slices.ContainsFunc(r.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port != nil && p.Port.String() == port })
		}) {
			t.Errorf("no egress rule allows port %s", port)
		}
	}
}

// TestSecretsArePlaceholders checks that no committed Secret holds anything
// usable, that each Secret the pod uses is described with the keys it
// reads, and that the example credentials.json is one serve accepts.
func TestSecretsArePlaceholders(t *testing.T) {
	d := loadDeployment(t)
	longRun := regexp.MustCompile(`[A-Za-z0-9+/=_-]{20,}`)
	for name, s := range d.secrets {
		if !strings.HasSuffix(d.files[name], ".example.yaml") {
			t.Errorf("Secret %s is in %s; Secrets belong in *.example.yaml, which is never applied", name, d.files[name])
		}
		if len(s.Data) > 0 {
			t.Errorf("Secret %s uses data:; use stringData with a placeholder anyone can read", name)
		}
		for key, v := range s.StringData {
			if m := longRun.FindString(v); m != "" {
				t.Errorf("Secret %s key %s holds %q, which looks like a real secret; commit a placeholder", name, key, m)
			}
		}
	}
	key, ok := d.secrets["aileron-state-key"]
	if !ok || !strings.Contains(key.StringData["state.key"], "REPLACE_ME") || len(key.StringData["state.key"]) == 32 {
		t.Error(`Secret aileron-state-key must hold a "REPLACE_ME" placeholder under state.key, never 32 bytes that would work as a key`)
	}

	// Every Secret the pod refers to is described, with the key used.
	spec := d.sts.Spec.Template.Spec
	refs := map[string][]string{}
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			refs[v.Secret.SecretName] = append(refs[v.Secret.SecretName], "")
		}
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				refs[e.ValueFrom.SecretKeyRef.Name] = append(refs[e.ValueFrom.SecretKeyRef.Name], e.ValueFrom.SecretKeyRef.Key)
			}
		}
	}
	for name, keys := range refs {
		s, ok := d.secrets[name]
		if !ok {
			t.Errorf("the pod uses Secret %s, which inputs.example.yaml does not describe", name)
			continue
		}
		for _, k := range keys {
			if _, ok := s.StringData[k]; k != "" && !ok {
				t.Errorf("the pod reads key %q of Secret %s, which has no such key", k, name)
			}
		}
	}

	// The example credentials.json is valid and binds nothing.
	creds, ok := d.secrets["aileron-credentials"]
	if !ok {
		t.Fatal("inputs.example.yaml describes no aileron-credentials Secret")
	}
	path := filepath.Join(t.TempDir(), "credentials.json")
	if err := os.WriteFile(path, []byte(creds.StringData["credentials.json"]), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := credentials.LoadFile(path)
	if err != nil {
		t.Fatalf("the example credentials.json: %v", err)
	}
	if f.Len() != 0 {
		t.Errorf("the example credentials.json binds %d credentials; it must bind none", f.Len())
	}
}
