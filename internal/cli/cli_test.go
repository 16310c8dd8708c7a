package cli

import (
	"flag"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

type conf struct {
	Name  string        `yaml:"name"`
	Every time.Duration `yaml:"every"`
	Banks []uint8       `yaml:"banks"`
	Count int           `yaml:"count"`
}

func bind(fs *flag.FlagSet, c *conf) {
	fs.StringVar(&c.Name, "name", c.Name, "")
	fs.DurationVar(&c.Every, "every", c.Every, "")
	fs.Var(Uint8List{P: &c.Banks}, "banks", "")
	fs.IntVar(&c.Count, "count", c.Count, "")
}

func load(path string, c *conf) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return yaml.Unmarshal(b, c)
}

func def() conf { return conf{Name: "default", Every: time.Second, Banks: []uint8{0, 4}, Count: 1} }

func TestPrecedence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("name: file\nevery: 5s\nbanks: [1, 2]\n"), 0o644)
	c, _, err := Parse("x", []string{"-config", path, "-every", "7s", "-banks", "3,9"}, def, bind, load)
	if err != nil {
		t.Fatal(err)
	}
	want := conf{Name: "file", Every: 7 * time.Second, Banks: []uint8{3, 9}, Count: 1}
	if c.Name != want.Name || c.Every != want.Every || len(c.Banks) != 2 || c.Banks[1] != 9 || c.Count != 1 {
		t.Errorf("got %+v, want %+v", c, want)
	}
	c, _, err = Parse("x", []string{"-count", "4"}, def, bind, load)
	if err != nil || c.Count != 4 || c.Name != "default" {
		t.Errorf("no file: %+v %v", c, err)
	}
	if _, _, err := Parse("x", []string{"-banks", "1,x"}, def, bind, load); err == nil {
		t.Error("bad list accepted")
	}
	if _, _, err := Parse("x", []string{"-log-level", "loud"}, def, bind, load); err == nil {
		t.Error("bad log level accepted")
	}
	if _, _, err := Parse("x", []string{"extra"}, def, bind, load); err == nil {
		t.Error("stray argument accepted")
	}
}

// noting is a configuration that takes note of the flags given.
type noting struct {
	conf
	given []string
}

func (n *noting) NoteFlags(names []string) { n.given = names }

// TestNoteFlags: a FlagNoter hears of the flags given on the command
// line, with a configuration file or without, and of no other.
func TestNoteFlags(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("name: file\n"), 0o644)
	def := func() noting { return noting{conf: def()} }
	bind := func(fs *flag.FlagSet, n *noting) { bind(fs, &n.conf) }
	load := func(path string, n *noting) error { return load(path, &n.conf) }
	for _, args := range [][]string{{"-count", "4"}, {"-config", path, "-count", "4"}} {
		n, _, err := Parse("x", args, def, bind, load)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(n.given, "count") || slices.Contains(n.given, "name") || slices.Contains(n.given, "every") {
			t.Errorf("%v: noted %v", args, n.given)
		}
	}
}

func TestByteSizes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		str  string
	}{
		{"1024", []int{1024}, "1k"},
		{"16k, 256K,1m,1000", []int{16 << 10, 256 << 10, 1 << 20, 1000}, "16k,256k,1m,1000"},
		{"2048m", nil, ""},
		{"16kb", nil, ""},
		{"-1k", nil, ""},
		{"", nil, ""},
	} {
		t.Run(tc.in, func(t *testing.T) {
			var got []int
			err := ByteSizes{P: &got}.Set(tc.in)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("%q parsed as %v", tc.in, got)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("%q: %v, %v; want %v", tc.in, got, err, tc.want)
			}
			if s := (ByteSizes{P: &got}).String(); s != tc.str {
				t.Errorf("String() = %q, want %q", s, tc.str)
			}
		})
	}
}

// TestFreePort: the address is on loopback, below the ephemeral range,
// and free for TCP and UDP.
func TestFreePort(t *testing.T) {
	addr, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	if port, _ := strconv.Atoi(p); host != "127.0.0.1" || port >= ephemeralLow() || port < ephemeralLow()/2 {
		t.Errorf("%s: want 127.0.0.1 and a port in [%d, %d)", addr, ephemeralLow()/2, ephemeralLow())
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	u.Close()
}
