package main

import (
	"errors"
	"runtime/debug"
	"testing"
)

func TestParseBytes(t *testing.T) {
	good := map[string]int64{
		"1":         1,
		"4096B":     4096,
		"64KiB":     64 << 10,
		"768MiB":    768 << 20,
		" 2 GiB ":   2 << 30,
		"268435456": 256 << 20,
	}
	for in, want := range good {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1MiB", "1.5GiB", "12MB", "MiB", "9223372036854775807GiB"} {
		if got, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q) = %d; want an error", in, got)
		}
	}
}

// TestSetMemoryLimit: a --memory-limit value becomes the runtime's soft
// limit until restored; an empty one changes nothing; a bad one is a
// usage error and changes nothing.
func TestSetMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	restore, err := setMemoryLimit("768MiB")
	if err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != 768<<20 {
		t.Errorf("limit = %d; want %d", got, 768<<20)
	}
	restore()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("restored limit = %d; want %d", got, before)
	}
	restore, err = setMemoryLimit("")
	if err != nil {
		t.Fatal(err)
	}
	restore()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("limit after an empty value = %d; want %d", got, before)
	}
	var ue usageError
	if _, err := setMemoryLimit("lots"); !errors.As(err, &ue) {
		t.Errorf("setMemoryLimit(lots) = %v; want a usage error", err)
	}
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("limit after a bad value = %d; want %d", got, before)
	}
}
