// Package kubernetes holds the example manifests for running `aileron-proxy
// serve` on Kubernetes (docs/deploy.md). Its tests decode every manifest
// strictly with the official API types, so that a misspelled field fails
// here rather than being dropped by the cluster, and check that the
// manifests agree with each other, with the image and with serve.
package kubernetes

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// manifest is one decoded document of a manifest file.
type manifest struct {
	file string
	obj  runtime.Object
}

// decoder returns a deserializer that knows the kinds the manifests may use
// and refuses unknown, duplicated and wrongly-cased fields, as the API
// server's strict field validation does.
func decoder(t testing.TB) runtime.Decoder {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, networkingv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatalf("building the scheme: %v", err)
		}
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}

// decodeAll decodes every YAML document of data. A strict decoding error
// (unknown or duplicate field) is an error like any other.
func decodeAll(dec runtime.Decoder, data []byte) ([]runtime.Object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []runtime.Object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
}

// stripComments drops whole-line comments, so a document of comments only
// counts as empty.
func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for line := range bytes.Lines(doc) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			b.Write(line)
		}
	}
	return b.Bytes()
}

// manifestFiles lists the YAML files of this directory but the
// kustomization.
func manifestFiles(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return f == "kustomization.yaml" })
	if len(files) < 5 {
		t.Fatalf("found only %d manifest files (%v); the checks would pass vacuously", len(files), files)
	}
	return files
}

// loadManifests decodes every manifest file strictly.
func loadManifests(t testing.TB) []manifest {
	t.Helper()
	dec := decoder(t)
	var all []manifest
	for _, f := range manifestFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeAll(dec, data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(objs) == 0 {
			t.Fatalf("%s: no Kubernetes object in it", f)
		}
		for _, o := range objs {
			all = append(all, manifest{file: f, obj: o})
		}
	}
	return all
}

// only returns the one object of type T, failing unless there is exactly one.
func only[T runtime.Object](t testing.TB, ms []manifest) T {
	t.Helper()
	var found []T
	for _, m := range ms {
		if o, ok := m.obj.(T); ok {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("want exactly one %T in the manifests, found %d", zero, len(found))
	}
	return found[0]
}

// TestManifestsDecodeStrictly decodes every document of every manifest with
// the Kubernetes API types, refusing unknown fields.
func TestManifestsDecodeStrictly(t *testing.T) {
	ms := loadManifests(t)
	kinds := map[string]int{}
	for _, m := range ms {
		kinds[reflect.TypeOf(m.obj).Elem().Name()]++
	}
	for _, k := range []string{"Namespace", "StatefulSet", "Service", "NetworkPolicy", "Secret"} {
		if kinds[k] == 0 {
			t.Errorf("no %s among the manifests (found %v)", k, kinds)
		}
	}
}

// TestStrictDecodingRefusesTypos proves the decoding above is strict: the
// real StatefulSet with one field misspelled, miscased, duplicated or
// misplaced fails to decode.
func TestStrictDecodingRefusesTypos(t *testing.T) {
	data, err := os.ReadFile("serve.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := decoder(t)
	if _, err := decodeAll(dec, data); err != nil {
		t.Fatalf("serve.yaml as committed: %v", err)
	}
	cases := []struct {
		name, old, new string
	}{
		{"misspelled", "containerPort: 3128", "containerPrt: 3128"},
		{"wrong case", "readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true"},
		{"duplicated", "replicas: 2", "replicas: 2\n  replicas: 3"},
		{"misplaced", "      enableServiceLinks: false", "      readOnlyRootFilesystem: true"},
		{"unknown kind", "kind: StatefulSet", "kind: StatefulSett"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !bytes.Contains(data, []byte(tc.old)) {
				t.Fatalf("serve.yaml no longer contains %q; update the case", tc.old)
			}
			bad := bytes.Replace(data, []byte(tc.old), []byte(tc.new), 1)
			if _, err := decodeAll(dec, bad); err == nil {
				t.Errorf("decoding serve.yaml with %q replaced by %q succeeded, want an error", tc.old, tc.new)
			} else {
				t.Logf("%v", err)
			}
		})
	}
}

// kustomization is the part of kustomization.yaml these manifests use.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

// TestKustomizationListsManifests checks that kustomization.yaml lists every
// manifest but the example inputs, which must never be applied over the
// real Secrets.
func TestKustomizationListsManifests(t *testing.T) {
	data, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := decodeStrictYAML(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("kustomization.yaml is %s %s, want kustomize.config.k8s.io/v1beta1 Kustomization", k.APIVersion, k.Kind)
	}
	var want []string
	for _, f := range manifestFiles(t) {
		if !strings.HasSuffix(f, ".example.yaml") {
			want = append(want, f)
		}
	}
	got := slices.Clone(k.Resources)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("kustomization.yaml lists %v, want %v (every manifest but *.example.yaml)", got, want)
	}
}
