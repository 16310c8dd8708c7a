package deployments

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/owl-latency/owl/internal/collector"
	"github.com/owl-latency/owl/internal/probe"
)

// yamlKeys lists the YAML keys of a configuration type, dotted, with "[]"
// after a list of mappings.
func yamlKeys(prefix string, t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || tag == "-" {
			continue
		}
		if tag == "" && f.Anonymous {
			out = append(out, yamlKeys(prefix, f.Type)...)
			continue
		}
		key, ft := prefix+tag, f.Type
		out = append(out, key)
		switch {
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			out = append(out, yamlKeys(key+"[].", ft.Elem())...)
		case ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct:
			out = append(out, yamlKeys(key+".", ft.Elem())...)
		case ft.Kind() == reflect.Struct && ft != reflect.TypeOf(time.Time{}):
			out = append(out, yamlKeys(key+".", ft)...)
		}
	}
	return out
}

// flagNames lists the flags a command's -h prints.
func flagNames(t *testing.T, bin string) []string {
	t.Helper()
	usage, _ := exec.Command(bin, "-h").CombinedOutput()
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(string(usage), -1) {
		out = append(out, m[1])
	}
	if len(out) < 10 {
		t.Fatalf("%s -h lists %d flags: %s", bin, len(out), usage)
	}
	return out
}

// TestConfigurationDocumented: every YAML key of the collector's and the
// probe's configuration, and every flag of both commands, has its line in
// docs/configuration.md.
func TestConfigurationDocumented(t *testing.T) {
	b, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for name, typ := range map[string]reflect.Type{"collector": reflect.TypeOf(collector.Config{}), "probe": reflect.TypeOf(probe.Config{})} {
		for _, k := range yamlKeys("", typ) {
			if !strings.Contains(doc, "| `"+k+"` |") {
				t.Errorf("%s key %s is not in docs/configuration.md", name, k)
			}
		}
	}
	bin := t.TempDir()
	// Built for their flags alone: without the profiles (default.pgo),
	// which would compile every dependency again for each.
	cmd := exec.Command("go", "build", "-pgo=off", "-o", bin+"/", "./cmd/collector", "./cmd/probe")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building: %v\n%s", err, out)
	}
	for _, name := range []string{"collector", "probe"} {
		for _, f := range flagNames(t, filepath.Join(bin, name)) {
			if !strings.Contains(doc, "| `-"+f+"` |") {
				t.Errorf("%s flag -%s is not in docs/configuration.md", name, f)
			}
		}
	}
}
