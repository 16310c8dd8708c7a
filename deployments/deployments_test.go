// Package deployments holds example configurations and service units; its
// test keeps the examples valid as the code changes.
package deployments

import (
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/owl-latency/owl/internal/collector"
	"github.com/owl-latency/owl/internal/probe"
	"github.com/owl-latency/owl/internal/security"
)

// secretFile names a certificate, key or secret an example reads from
// /etc/owl.
var secretFile = regexp.MustCompile(`/etc/owl/(?:tls|gossip)/([A-Za-z0-9._-]+)`)

// withDevFiles writes the example text to a temporary file whose
// certificate, key and secret paths under /etc/owl name files of a fresh
// development CA (a Kubernetes secret's tls.crt and tls.key are the
// collector's), so that Validate can read them.
func withDevFiles(t *testing.T, text string) string {
	t.Helper()
	dir := t.TempDir()
	spec := security.DevSpec{Readers: []string{"ops"}}
	for _, m := range secretFile.FindAllStringSubmatch(text, -1) {
		name := strings.TrimSuffix(strings.TrimSuffix(m[1], ".crt"), ".key")
		if id, ok := strings.CutPrefix(name, "probe-"); ok {
			spec.Probes = append(spec.Probes, id)
		}
	}
	spec.Collectors = []string{"collector"}
	slices.Sort(spec.Probes)
	spec.Probes = slices.Compact(spec.Probes)
	if err := security.MakeDevCerts(dir, spec); err != nil {
		t.Fatal(err)
	}
	text = secretFile.ReplaceAllStringFunc(text, func(s string) string {
		base := filepath.Base(s)
		switch base {
		case "tls.crt":
			base = "collector-collector.crt"
		case "tls.key":
			base = "collector-collector.key"
		}
		return filepath.Join(dir, base)
	})
	f := filepath.Join(dir, "example.yaml")
	if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// readExample is withDevFiles of an example file.
func readExample(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return withDevFiles(t, string(b))
}

func TestExampleConfigs(t *testing.T) {
	c := collector.DefaultConfig()
	if err := collector.LoadFile(readExample(t, "collector.yaml"), &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	p := probe.DefaultConfig()
	if err := probe.LoadFile(readExample(t, "probe.yaml"), &p); err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := p.Clock.Validate(); err != nil {
		t.Errorf("example clock: %v", err)
	}
	if p.ExplicitParams {
		if err := c.Params.Compatible(p.Params); err != nil {
			t.Errorf("example probe would be rejected by the example collector: %v", err)
		}
	}
}

// buildLikeDockerfile runs the Dockerfile's go build line (no cgo) into a
// temporary directory and returns it.
func buildLikeDockerfile(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("container/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for l := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(l, "RUN CGO_ENABLED=0 go build ") {
			line = strings.TrimPrefix(l, "RUN CGO_ENABLED=0 go ")
		}
	}
	if line == "" {
		t.Fatal("no CGO_ENABLED=0 go build line in the Dockerfile")
	}
	out := t.TempDir()
	args := strings.Fields(strings.ReplaceAll(line, "/out/", out+"/"))
	cmd := exec.Command("go", args...)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return out
}

// manifests reads every document of the Kubernetes manifests.
func manifests(t *testing.T) []map[string]any {
	t.Helper()
	files, _ := filepath.Glob("kubernetes/*.yaml")
	if len(files) == 0 {
		t.Fatal("no manifests")
	}
	var docs []map[string]any
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var d map[string]any
			if err := dec.Decode(&d); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			docs = append(docs, d)
		}
	}
	return docs
}

// dig walks nested maps and lists ("containers.0" style keys).
func dig(v any, keys ...string) any {
	for _, k := range keys {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// TestKubernetesManifests: the collectors' configuration loads and is
// valid, accepts the probes' (default) parameters, and every flag the
// containers are started with exists in the binaries the Dockerfile
// builds.
func TestKubernetesManifests(t *testing.T) {
	bin := buildLikeDockerfile(t)
	kinds := map[string]bool{}
	for _, d := range manifests(t) {
		kind, _ := d["kind"].(string)
		kinds[kind] = true
		switch kind {
		case "ConfigMap":
			text, _ := dig(d, "data", "collector.yaml").(string)
			f := withDevFiles(t, text)
			c := collector.DefaultConfig()
			if err := collector.LoadFile(f, &c); err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			if !c.Cluster.Enabled() || len(c.Cluster.Join) == 0 {
				t.Errorf("the collectors' configuration makes no cluster: %+v", c.Cluster)
			}
			if err := c.Params.Compatible(probe.DefaultConfig().Params); err != nil {
				t.Errorf("probes with default parameters would be refused: %v", err)
			}
		case "StatefulSet", "DaemonSet":
			containers, _ := dig(d, "spec", "template", "spec", "containers").([]any)
			for i := range containers {
				cmd, _ := dig(containers[i], "command", "0").(string)
				name := filepath.Base(cmd)
				usage, _ := exec.Command(filepath.Join(bin, name), "-h").CombinedOutput()
				if !strings.Contains(string(usage), "-config") {
					t.Fatalf("%s -h: %s", name, usage)
				}
				args, _ := dig(containers[i], "args").([]any)
				for _, a := range args {
					flag, _, _ := strings.Cut(strings.TrimLeft(a.(string), "-"), "=")
					if !strings.Contains(string(usage), "\n  -"+flag+" ") && !strings.Contains(string(usage), "\n  -"+flag+"\n") {
						t.Errorf("%s %s: %s has no flag -%s", kind, dig(d, "metadata", "name"), name, flag)
					}
				}
			}
		}
	}
	for _, k := range []string{"Namespace", "ConfigMap", "Service", "StatefulSet", "DaemonSet"} {
		if !kinds[k] {
			t.Errorf("no %s in the manifests", k)
		}
	}
}

// TestDashboardMetrics: every metric the Grafana dashboard plots is one
// owl exports (a name in the services' code).
func TestDashboardMetrics(t *testing.T) {
	b, err := os.ReadFile("grafana/owl.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`owl_[a-z0-9_]+`)
	known := map[string]bool{}
	err = filepath.WalkDir("../internal", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		src, err := os.ReadFile(p)
		for _, m := range regexp.MustCompile(`"(owl_[a-z0-9_]+)"`).FindAllSubmatch(src, -1) {
			known[string(m[1])] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	used := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range name.FindAllString(tg.Expr, -1) {
				used++
				base := m
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if s, ok := strings.CutSuffix(m, suf); ok && known[s] {
						base = s
					}
				}
				if !known[base] {
					t.Errorf("panel %q plots %s, which owl does not export", p.Title, m)
				}
			}
		}
	}
	if used < 8 {
		t.Errorf("the dashboard uses only %d metrics", used)
	}
}
