package deploy

import (
	"os"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestShippedConfigsSyncAlways checks the durability policy of every
// shipped server configuration: the nodes of deploy/nats (which compose
// runs) start with JetStream syncing every write before acknowledging it,
// as the running servers report, and the Helm values set the same.
func TestShippedConfigsSyncAlways(t *testing.T) {
	sh := startShipped(t)
	for i, s := range sh.servers {
		cfg := s.JetStreamConfig()
		if cfg == nil || !cfg.SyncAlways {
			t.Errorf("n%d: JetStream config %+v: want sync_always", i+1, cfg)
		}
	}
	b, err := os.ReadFile("compose/docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Image   string   `json:"image"`
			Command []string `json:"command"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatal(err)
	}
	nodes := 0
	for name, svc := range compose.Services {
		if len(svc.Command) == 2 && svc.Command[0] == "-c" {
			if want := "/etc/nats/" + name + ".conf"; svc.Command[1] != want {
				t.Errorf("compose %s runs %s, want %s (a shipped node config)", name, svc.Command[1], want)
			}
			nodes++
		}
	}
	if nodes != 3 {
		t.Errorf("compose runs %d nats nodes from deploy/nats, want 3", nodes)
	}
	vb, err := os.ReadFile("k8s/nats-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Config struct {
			Merge struct {
				JetStream map[string]any `json:"jetstream"`
			} `json:"merge"`
		} `json:"config"`
	}
	if err := yaml.Unmarshal(vb, &values); err != nil {
		t.Fatal(err)
	}
	if v := values.Config.Merge.JetStream["sync_interval"]; v != "always" {
		t.Errorf("k8s/nats-values.yaml config.merge.jetstream.sync_interval = %v, want always", v)
	}
}
