package store

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// filledStore makes a store with enough results to span many pages and
// returns its directory.
func filledStore(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for e := range int64(600) {
		r := &owlv1.PathStats{Path: "p", Epoch: e, MeanNs: float64(e), Detail: strings.Repeat("x", 200)}
		if err := s.PutResult(r, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestOpenDamaged: a damaged database is refused at Open with an error
// that names the file and what to do; the process does not crash, and an
// emptied file is not taken for a new one.
func TestOpenDamaged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"truncated to half", func(t *testing.T, path string) {
			fi, _ := os.Stat(path)
			if err := os.Truncate(path, fi.Size()/2); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated to 8 KiB", func(t *testing.T, path string) {
			if err := os.Truncate(path, 8<<10); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated to 0 bytes", func(t *testing.T, path string) {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		}},
		{"random bytes in every third page", func(t *testing.T, path string) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			const page = 4096
			for off := 2 * page; off+page <= len(b); off += 3 * page {
				for i := off; i < off+page; i++ {
					b[i] = byte(rng.Uint32())
				}
			}
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filledStore(t)
			path := filepath.Join(dir, "owl.db")
			tc.damage(t, path)
			s, err := Open(dir)
			if err == nil {
				s.Close()
				t.Fatal("a damaged store opened without a word")
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "backup") {
				t.Errorf("error does not name the file and what to do: %v", err)
			}
			t.Log(err)
		})
	}
}

// TestOpenTruncatedAfterDeletes: with pages freed early in the file (the
// freelist there), a truncated file opens in bbolt and only the page walk
// meets the missing pages: refused all the same.
func TestOpenTruncatedAfterDeletes(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for e := range int64(1500) {
		p := Pending{Probe: "a", Report: &owlv1.EpochReport{Path: "p", Epoch: e, Role: owlv1.Role_ROLE_UPSTREAM, Lda: make([]byte, 300)}}
		if err := s.PutPending(p); err != nil {
			t.Fatal(err)
		}
	}
	for e := range int64(750) {
		if err := s.DeletePending("p", e); err != nil {
			t.Fatal(err)
		}
	}
	for e := range int64(50) {
		if err := s.PutResult(&owlv1.PathStats{Path: "p", Epoch: e}, false); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	path := filepath.Join(dir, "owl.db")
	fi, _ := os.Stat(path)
	if err := os.Truncate(path, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(dir); err == nil {
		s.Close()
		t.Fatal("a truncated store opened without a word")
	} else if !strings.Contains(err.Error(), "backup") {
		t.Errorf("error does not say what to do: %v", err)
	}
}
