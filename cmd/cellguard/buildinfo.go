package main

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// version is set at link time (-ldflags "-X main.version=v1.2.3"); without
// it the module version or "devel" is reported.
var version = ""

// buildVersion returns the version, VCS revision and Go version of this
// binary.
func buildVersion() (ver, revision, goVersion string) {
	ver, revision, goVersion = version, "unknown", runtime.Version()
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return orDevel(ver), revision, goVersion
	}
	if ver == "" && bi.Main.Version != "(devel)" {
		ver = bi.Main.Version
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			revision = s.Value
		}
	}
	return orDevel(ver), revision, goVersion
}

func orDevel(v string) string {
	if v == "" {
		return "devel"
	}
	return v
}

// buildInfo is cellguard_build_info: always 1, with the build as labels.
// The CellguardCommitterDown alert keys on it.
func buildInfo() prometheus.Collector {
	ver, rev, gov := buildVersion()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "cellguard_build_info",
		Help:        "Always 1; labels name the cellguard build.",
		ConstLabels: prometheus.Labels{"version": ver, "revision": rev, "goversion": gov},
	})
	g.Set(1)
	return g
}
