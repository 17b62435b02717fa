package deploy

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/conf"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// TestKubernetesManifests decodes every document of k8s/committer.yaml
// strictly into its Kubernetes API type (an unknown or misplaced field
// fails) and checks what deploy/README.md promises: a PodDisruptionBudget,
// the restricted security context, a pinned image, resources, no
// password in any URL.
func TestKubernetesManifests(t *testing.T) {
	b, err := os.ReadFile("k8s/committer.yaml")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	var dep appsv1.Deployment
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		var obj any
		switch meta.Kind {
		case "Deployment":
			obj = &dep
		case "Service":
			obj = &corev1.Service{}
		case "Secret":
			obj = &corev1.Secret{}
		case "PodDisruptionBudget":
			obj = &policyv1.PodDisruptionBudget{}
		case "NetworkPolicy":
			obj = &networkingv1.NetworkPolicy{}
		default:
			t.Fatalf("unexpected kind %q", meta.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Errorf("%s: %v", meta.Kind, err)
		}
		kinds[meta.Kind] = true
	}
	for _, k := range []string{"Deployment", "Service", "Secret", "PodDisruptionBudget", "NetworkPolicy"} {
		if !kinds[k] {
			t.Errorf("no %s", k)
		}
	}
	pod := dep.Spec.Template.Spec
	if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil {
		t.Error("pod security context is not restricted (runAsNonRoot, seccomp)")
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil ||
			len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("container %s: security context not restricted", c.Name)
		}
		if !strings.Contains(c.Image, ":") || strings.HasSuffix(c.Image, ":latest") {
			t.Errorf("container %s: image %q is not pinned", c.Name, c.Image)
		}
		if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("container %s: no memory request or limit", c.Name)
		}
		for _, e := range c.Env {
			if strings.Contains(e.Value, "@") {
				t.Errorf("container %s: %s carries user information: %q", c.Name, e.Name, e.Value)
			}
		}
	}
}

// TestHelmValuesAccountsMatch checks that the accounts in the NATS chart's
// values are deploy/nats/accounts.conf: both are parsed the way
// nats-server parses its configuration and compared.
func TestHelmValuesAccountsMatch(t *testing.T) {
	roles := []string{"COMMITTER", "WORKER", "READER", "ADMIN", "SYSTEM"}
	for _, r := range roles {
		t.Setenv("CELLGUARD_"+r+"_NKEY", "ZZNKEY"+r)
		t.Setenv("CELLGUARD_"+r+"_INBOX", "_INBOX_ZZNKEY"+r+".>")
	}
	b, err := os.ReadFile("nats/accounts.conf")
	if err != nil {
		t.Fatal(err)
	}
	want, err := conf.Parse(string(b))
	if err != nil {
		t.Fatal(err)
	}
	vb, err := os.ReadFile("k8s/nats-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Config struct {
			Merge map[string]any `json:"merge"`
		} `json:"config"`
	}
	if err := yaml.Unmarshal(vb, &values); err != nil {
		t.Fatal(err)
	}
	// The chart writes the merge block out as JSON (valid NATS config),
	// with << $VAR >> unquoted.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(map[string]any{"accounts": values.Config.Merge["accounts"], "system_account": values.Config.Merge["system_account"]}); err != nil {
		t.Fatal(err)
	}
	js := buf.Bytes()
	for _, r := range roles {
		js = bytes.ReplaceAll(js, []byte(`"<< $CELLGUARD_`+r+`_NKEY >>"`), []byte(`$CELLGUARD_`+r+`_NKEY`))
		js = bytes.ReplaceAll(js, []byte(`"<< $CELLGUARD_`+r+`_INBOX >>"`), []byte(`$CELLGUARD_`+r+`_INBOX`))
	}
	got, err := conf.Parse(string(js))
	if err != nil {
		t.Fatalf("helm accounts: %v\n%s", err, js)
	}
	if !reflect.DeepEqual(got["accounts"], want["accounts"]) || got["system_account"] != want["system_account"] {
		t.Error("k8s/nats-values.yaml accounts differ from nats/accounts.conf")
	}
	for _, key := range []string{"tls"} {
		if !strings.Contains(string(vb), key) {
			t.Errorf("helm values have no %s", key)
		}
	}
}
