package committer

import (
	"errors"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero Config: %v", err)
	}
	for name, cfg := range map[string]Config{
		"batch too large":        {BatchSize: 1001},
		"ack pending < batch":    {BatchSize: 64, MaxAckPending: 8},
		"pull expiry flaps pin":  {PinnedTTL: 3 * time.Second, PullExpiry: 2 * time.Second},
		"pull expiry too short":  {PullExpiry: 500 * time.Millisecond},
		"bad prefix":             {Prefix: "a.b"},
		"bad dataset":            {Datasets: []string{"a.b"}},
		"bad policy":             {DeletionPolicy: "lenient"},
		"txn limit over msg max": {MaxTxnBytes: 2 << 20, StreamMaxMsgSize: 1 << 20},
		"replicas":               {Replicas: 7},
	} {
		if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidConfig", name, err)
		}
	}
}
