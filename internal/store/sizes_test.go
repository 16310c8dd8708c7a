package store

import (
	"testing"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// Sizes written with an epoch are read back after a reopen, the newest
// of a path replacing the one before; an unreadable record is reported
// and removed.
func TestPathSizes(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	first := PathSizes{Path: "p", Setting: 7, Sizes: &owlv1.PathAssignment{RdaBuckets: 1000, SampleShift: 2}}
	second := PathSizes{Path: "p", Setting: 7, Sizes: &owlv1.PathAssignment{RdaBuckets: 64, SampleShift: 3, LdsOff: true}}
	other := PathSizes{Path: "q", Setting: 8, Sizes: &owlv1.PathAssignment{LdaRows: 32}}
	for _, w := range []Write{{Sizes: []PathSizes{first, other}}, {Sizes: []PathSizes{second}}} {
		if err := s.Apply(w); err != nil {
			t.Fatal(err)
		}
	}
	err = s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketSizes).Put([]byte("r"), []byte{1, 2}) })
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, bad, err := s.AllPathSizes()
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) != 1 {
		t.Errorf("unreadable records reported: %v, want the one of path r", bad)
	}
	want := map[string]PathSizes{"p": second, "q": other}
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for _, g := range got {
		w := want[g.Path]
		if g.Setting != w.Setting || !proto.Equal(g.Sizes, w.Sizes) {
			t.Errorf("path %s: %d %v, want %d %v", g.Path, g.Setting, g.Sizes, w.Setting, w.Sizes)
		}
	}
	if _, bad, _ := s.AllPathSizes(); len(bad) != 0 {
		t.Errorf("the unreadable record is still there: %v", bad)
	}
	if err := s.Apply(Write{Sizes: []PathSizes{{Setting: 1, Sizes: &owlv1.PathAssignment{}}}}); err == nil {
		t.Error("sizes without a path stored")
	}
}

// A sizes record read from a damaged database is refused, or decoded
// into sizes that encode again and read back the same.
func FuzzPathSizes(f *testing.F) {
	v, _ := PathSizes{Path: "p", Setting: 3, Sizes: &owlv1.PathAssignment{RdaBuckets: 64, LdsRows: 5}}.encode()
	f.Add(v)
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1, 0x38, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodePathSizes("p", b)
		if err != nil {
			return
		}
		again, err := p.encode()
		if err != nil {
			t.Fatalf("decoded sizes do not encode: %v", err)
		}
		q, err := decodePathSizes("p", again)
		if err != nil || q.Setting != p.Setting || !proto.Equal(q.Sizes, p.Sizes) {
			t.Fatalf("decoded again: %v %v, want %v (%v)", q.Setting, q.Sizes, p.Sizes, err)
		}
	})
}
