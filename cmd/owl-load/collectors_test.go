package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/owl-latency/owl/internal/collector"
	"github.com/owl-latency/owl/internal/netpath"
)

func TestLoadPaths(t *testing.T) {
	tests := []struct {
		probes, paths int
		want          []netpath.Path
	}{
		{2, 2, []netpath.Path{{Name: "load-0", Upstream: "load-p0", Downstream: "load-p1"}, {Name: "load-1", Upstream: "load-p0", Downstream: "load-p1"}}},
		{3, 3, []netpath.Path{{Name: "load-0", Upstream: "load-p0", Downstream: "load-p1"}, {Name: "load-1", Upstream: "load-p2", Downstream: "load-p0"},
			{Name: "load-2", Upstream: "load-p1", Downstream: "load-p2"}}},
	}
	for _, tt := range tests {
		if got := loadPaths(tt.probes, tt.paths); !slices.EqualFunc(got, tt.want, func(a, b netpath.Path) bool {
			return a.Name == b.Name && a.Upstream == b.Upstream && a.Downstream == b.Downstream
		}) {
			t.Errorf("%d probes, %d paths: %v, want %v", tt.probes, tt.paths, got, tt.want)
		}
	}
}

// TestCollectorYAML checks that the collector takes the configuration
// owl-load writes: its paths, and the cluster it joins.
func TestCollectorYAML(t *testing.T) {
	dir := t.TempDir()
	paths := loadPaths(3, 5)
	y := collectorYAML(collectorSetup{grpc: "127.0.0.1:0", http: "127.0.0.1:0", dataDir: filepath.Join(dir, "data"), pprof: true,
		clusterBind: "127.0.0.1:0", clusterName: "c1", join: []string{"127.0.0.1:7946", "127.0.0.1:7947"}}, paths)
	file := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(file, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := collector.DefaultConfig()
	if err := collector.LoadFile(file, &cfg); err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Paths) != len(paths) || cfg.Paths[1].Upstream != "load-p2" || cfg.Paths[4].Downstream != "load-p0" {
		t.Errorf("paths %v, want %v", cfg.Paths, paths)
	}
	if !cfg.Pprof || cfg.Cluster.Name != "c1" || !slices.Equal(cfg.Cluster.Join, []string{"127.0.0.1:7946", "127.0.0.1:7947"}) {
		t.Errorf("pprof %v, cluster %+v", cfg.Pprof, cfg.Cluster)
	}
}

func TestQuantile(t *testing.T) {
	ds := []time.Duration{4 * time.Second, time.Second, 3 * time.Second, 2 * time.Second}
	for _, tt := range []struct {
		q    float64
		want float64
	}{{0.5, 2}, {0.99, 4}, {1, 4}, {0, 1}} {
		if got := quantile(ds, tt.q); got != tt.want {
			t.Errorf("quantile %v: %v, want %v", tt.q, got, tt.want)
		}
	}
	if quantile(nil, 0.5) != 0 {
		t.Error("quantile of nothing")
	}
}
