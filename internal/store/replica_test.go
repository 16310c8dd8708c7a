package store

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

func openTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func side(path string, epoch int64, role owlv1.Role, at time.Time) Pending {
	return Pending{Probe: "op-" + role.String(), Received: at, Report: &owlv1.EpochReport{Path: path, Epoch: epoch, Role: role, Lda: []byte{byte(epoch)}}}
}

// sideKeys lists the sides all returns as "path/epoch/role", sorted.
func sideKeys(t *testing.T, all func() ([]Pending, []error, error)) []string {
	t.Helper()
	ps, bad, err := all()
	if err != nil || len(bad) > 0 {
		t.Fatal(err, bad)
	}
	var out []string
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%s/%d/%d", p.Report.GetPath(), p.Report.GetEpoch(), p.Report.GetRole()))
	}
	slices.Sort(out)
	return out
}

func TestReplicaPending(t *testing.T) {
	s := openTest(t)
	up, down := owlv1.Role_ROLE_UPSTREAM, owlv1.Role_ROLE_DOWNSTREAM
	t0 := time.Unix(100, 0)
	err := s.Apply(Write{ReplicaPending: []Pending{side("p", 1, up, t0), side("p", 1, down, t0), side("p", 2, up, t0), side("q", 1, down, t0.Add(time.Hour))}})
	if err != nil {
		t.Fatal(err)
	}
	if got := sideKeys(t, s.AllPending); len(got) != 0 {
		t.Fatalf("copies of sides in pending: %v", got)
	}
	// Done deletes an epoch's copies before the write's new ones go in.
	err = s.Apply(Write{ReplicaDone: []EpochRef{{"p", 1}, {"p", 2}}, ReplicaPending: []Pending{side("p", 2, down, t0)}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sideKeys(t, s.AllReplicaPending), []string{"p/2/2", "q/1/2"}; !slices.Equal(got, want) {
		t.Fatalf("copies %v, want %v", got, want)
	}
	p, err := s.TakeReplicaSide("p", 2, down)
	if err != nil || p == nil || p.Probe != "op-ROLE_DOWNSTREAM" || !p.Received.Equal(t0) || !proto.Equal(p.Report, side("p", 2, down, t0).Report) {
		t.Fatalf("took %+v, %v", p, err)
	}
	if p, err := s.TakeReplicaSide("p", 2, down); p != nil || err != nil {
		t.Fatalf("took it twice: %+v, %v", p, err)
	}
	if err := s.Apply(Write{ReplicaPending: []Pending{side("p", 3, up, t0)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteReplicaSide("p", 3, down); err != nil {
		t.Fatal(err)
	}
	if got, want := sideKeys(t, s.AllReplicaPending), []string{"p/3/1", "q/1/2"}; !slices.Equal(got, want) {
		t.Fatalf("after deleting the other role: %v, want %v", got, want)
	}
	if n, err := s.PruneReplicaPending(t0.Add(time.Minute)); n != 1 || err != nil {
		t.Fatalf("pruned %d, %v; want 1", n, err)
	}
	if got, want := sideKeys(t, s.AllReplicaPending), []string{"q/1/2"}; !slices.Equal(got, want) {
		t.Fatalf("after pruning: %v, want %v", got, want)
	}
}

func TestApplyKeep(t *testing.T) {
	s := openTest(t)
	if err := s.PutResult(&owlv1.PathStats{Path: "p", Epoch: 1, MeanNs: 1}, false); err != nil {
		t.Fatal(err)
	}
	keepOld := func(stored, incoming *owlv1.PathStats) bool { return stored.GetMeanNs() == 1 }
	err := s.Apply(Write{Keep: keepOld, Results: []*owlv1.PathStats{{Path: "p", Epoch: 1, MeanNs: 2}, {Path: "p", Epoch: 2, MeanNs: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Result("p", 1); r.GetMeanNs() != 1 {
		t.Errorf("epoch 1 replaced: %v", r)
	}
	if r, _ := s.Result("p", 2); r.GetMeanNs() != 2 {
		t.Errorf("epoch 2 not stored: %v", r)
	}
	// Keep sees the results stored earlier in the same write.
	err = s.Apply(Write{Keep: keepOld, Results: []*owlv1.PathStats{{Path: "p", Epoch: 3, MeanNs: 1}, {Path: "p", Epoch: 3, MeanNs: 3}}})
	if r, _ := s.Result("p", 3); err != nil || r.GetMeanNs() != 1 {
		t.Errorf("epoch 3: %v, %v", r, err)
	}
}

// TestDigests: the digest index sums each block's results, per path,
// through every kind of write (a result replaced, kept, updated, and a
// conflict count that is not part of the digest), and a database without
// the index (an older collector's) gets it when opened.
func TestDigests(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	epochs := []int64{-300, -1, 0, 1, 255, 256, 700}
	for i := range 300 {
		r := &owlv1.PathStats{Path: []string{"p", "p2"}[i%2], Epoch: epochs[rng.IntN(len(epochs))], MeanNs: float64(rng.IntN(5)), Reordered: uint64(rng.IntN(3))}
		switch i % 4 {
		case 0:
			err = s.PutResult(r, false)
		case 1:
			keep := func(stored, in *owlv1.PathStats) bool { return stored.GetMeanNs() > in.GetMeanNs() }
			err = s.Apply(Write{Results: []*owlv1.PathStats{r}, Keep: keep})
		case 2:
			_, err = s.UpdateResult(r.GetPath(), r.GetEpoch(), func(x *owlv1.PathStats) bool {
				x.BoundaryMatched++
				x.ConflictingReports += uint32(rng.IntN(2))
				return rng.IntN(3) > 0
			})
		case 3:
			r.ConflictingReports = 9
			err = s.Apply(Write{Results: []*owlv1.PathStats{r}})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	scanned := func(path string) map[int64]uint64 {
		out := map[int64]uint64{}
		for _, e := range epochs {
			if r, _ := s.Result(path, e); r != nil {
				out[BlockOf(e, DigestBlock)] += ResultDigest(r)
			}
		}
		return out
	}
	for _, path := range []string{"p", "p2", "none"} {
		if got, err := s.Digests(path); err != nil || !maps.Equal(got, scanned(path)) {
			t.Errorf("%s: index %v (%v), want %v", path, got, err, scanned(path))
		}
	}
	want := scanned("p")
	_ = s.db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketDigests) })
	s.Close()
	if s, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.Digests("p"); err != nil || !maps.Equal(got, want) || len(want) != 5 {
		t.Errorf("rebuilt: %v (%v), want %v in 5 blocks", got, err, want)
	}
	for e, want := range map[int64]int64{0: 0, 1: 0, 255: 0, 256: 256, -1: -256, -256: -256, -257: -512} {
		if got := BlockOf(e, 256); got != want {
			t.Errorf("BlockOf(%d) = %d, want %d", e, got, want)
		}
	}
}

func TestStoredEpochs(t *testing.T) {
	s := openTest(t)
	for _, path := range []string{"p", "p2"} {
		for e := int64(1); e <= 5; e++ {
			w := Write{Results: []*owlv1.PathStats{{Path: path, Epoch: e}}}
			if e%2 == 1 { // odd epochs have flows, sketches and a boundary record
				for h := range uint64(2) {
					w.Flows = append(w.Flows, FlowResult{Hash: h + 10, Stats: &owlv1.FlowStats{Path: path, Epoch: e, Packets: float64(h)}})
				}
				w.LDS = []LDSPair{{EpochRef: EpochRef{path, e}, Up: []byte{1, byte(e)}, Down: []byte{2}}}
				w.Boundaries = []Boundary{{EpochRef: EpochRef{path, e}, Data: []byte{3, byte(e)}}}
			}
			if err := s.Apply(w); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := s.StoredEpochs("p", 2, 2, func(e int64) bool { return e == 2 })
	if err != nil || len(got) != 2 {
		t.Fatalf("%v, %v", got, err)
	}
	a, b := got[0], got[1]
	if a.Result.GetEpoch() != 3 || b.Result.GetEpoch() != 4 {
		t.Fatalf("epochs %d and %d, want 3 and 4 (2 is skipped)", a.Result.GetEpoch(), b.Result.GetEpoch())
	}
	if len(a.Flows) != 2 || a.Flows[1].Hash != 11 || a.Flows[1].Stats.GetPackets() != 1 || a.Flows[0].Stats.GetPath() != "p" {
		t.Errorf("flows of epoch 3: %v", a.Flows)
	}
	if a.LDS == nil || !bytes.Equal(a.LDS.Up, []byte{1, 3}) || !bytes.Equal(a.LDS.Down, []byte{2}) || a.LDS.Epoch != 3 || a.LDS.Path != "p" {
		t.Errorf("sketches of epoch 3: %+v", a.LDS)
	}
	if !bytes.Equal(a.Boundary, []byte{3, 3}) {
		t.Errorf("boundary of epoch 3: %v", a.Boundary)
	}
	if len(b.Flows) != 0 || b.LDS != nil || b.Boundary != nil {
		t.Errorf("epoch 4 has no flows, sketches or boundary record: %+v", b)
	}
	if got, err := s.StoredEpochs("p", 5, 10, func(int64) bool { return false }); err != nil || len(got) != 1 || got[0].Result.GetPath() != "p" {
		t.Errorf("from the last epoch: %v, %v", got, err)
	}
}

// TestDigestsAfterAnOlderWriter: results an older collector stored,
// without moving the digest index, are in the index once a collector
// that keeps it opens the database again; a database only collectors
// that keep it wrote is not indexed again (every write is noted).
func TestDigestsAfterAnOlderWriter(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for e := int64(1); e <= 3; e++ {
		if err := s.PutPending(side("p", e, owlv1.Role_ROLE_UPSTREAM, time.Now())); err != nil {
			t.Fatal(err)
		}
		w := Write{Results: []*owlv1.PathStats{{Path: "p", Epoch: e, MeanNs: float64(e)}}, Done: []EpochRef{{"p", e}},
			Boundaries: []Boundary{{EpochRef: EpochRef{"p", e}, Data: []byte{1}}}}
		if err := s.Apply(w); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(dir, "owl.db"), 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	if stale, err := digestsStale(db); err != nil || stale {
		t.Fatalf("after the store's own writes: stale %t (%v)", stale, err)
	}
	// An older collector stores epoch 4 and changes epoch 1.
	err = db.Update(func(tx *bolt.Tx) error {
		for _, r := range []*owlv1.PathStats{{Path: "p", Epoch: 4, MeanNs: 4}, {Path: "p", Epoch: 1, MeanNs: 10}} {
			v, err := proto.Marshal(r)
			if err != nil {
				return err
			}
			if err := tx.Bucket(bucketResults).Put(epochKey(r.GetPath(), r.GetEpoch()), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if stale, err := digestsStale(db); err != nil || !stale {
		t.Fatalf("after an older writer: stale %t (%v)", stale, err)
	}
	db.Close()
	if s, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := uint64(0)
	for e := int64(1); e <= 4; e++ {
		r, err := s.Result("p", e)
		if err != nil || r == nil {
			t.Fatalf("epoch %d: %v, %v", e, r, err)
		}
		want += ResultDigest(r)
	}
	if got, err := s.Digests("p"); err != nil || len(got) != 1 || got[0] != want {
		t.Errorf("index %v (%v), want block 0 at %x", got, err, want)
	}
}
