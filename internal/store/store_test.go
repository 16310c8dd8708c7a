package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/synopsis/lds"
	bolt "go.etcd.io/bbolt"
)

func TestResultsRangeAndOrder(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []int64{-2, 5, -1, 0, 3} {
		if err := s.PutResult(&owlv1.PathStats{Path: "p", Epoch: e, MeanNs: float64(e)}, false); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.PutResult(&owlv1.PathStats{Path: "p2", Epoch: 1}, false)
	_ = s.PutResult(&owlv1.PathStats{Path: "o", Epoch: 1}, false)
	got, err := s.Results("p", -1, 4, 100)
	if err != nil {
		t.Fatal(err)
	}
	var es []int64
	for _, r := range got {
		es = append(es, r.GetEpoch())
	}
	if len(es) != 3 || es[0] != -1 || es[1] != 0 || es[2] != 3 {
		t.Errorf("epochs %v, want [-1 0 3]", es)
	}
	if got, _ := s.Results("p", -10, 10, 2); len(got) != 2 || got[1].GetEpoch() != 5 {
		t.Errorf("limit keeps the newest: %v", got)
	}
	// Read from the newest end: to between, past and before the keys
	// of the path, next to other paths' keys.
	for _, tc := range []struct {
		from, to int64
		limit    int
		want     []int64
	}{
		{-10, 4, 1, []int64{3}},
		{-10, 3, 2, []int64{0, 3}},
		{math.MinInt64 / 2, math.MaxInt64 / 2, 1, []int64{5}},
		{math.MinInt64 / 2, math.MaxInt64 / 2, 10, []int64{-2, -1, 0, 3, 5}},
		{-10, -3, 5, nil},
		{6, 10, 5, nil},
		{1, 2, 5, nil},
		{0, 0, 5, []int64{0}},
		{-10, 10, 0, nil},
	} {
		got, err := s.Results("p", tc.from, tc.to, tc.limit)
		var es []int64
		for _, r := range got {
			es = append(es, r.GetEpoch())
		}
		if err != nil || !slices.Equal(es, tc.want) {
			t.Errorf("Results(p, %d, %d, %d) = %v, %v; want %v", tc.from, tc.to, tc.limit, es, err, tc.want)
		}
	}
	s.Close()

	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r, _ := s.Result("p", 5); r.GetMeanNs() != 5 {
		t.Errorf("after reopen: %v", r)
	}
}

func TestPending(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Unix(5, 6)
	for _, role := range []owlv1.Role{owlv1.Role_ROLE_UPSTREAM, owlv1.Role_ROLE_DOWNSTREAM} {
		p := Pending{Probe: "op-" + role.String(), Received: now, Report: &owlv1.EpochReport{Path: "p", Epoch: 9, Role: role, Lda: []byte{1, 2}}}
		if err := s.PutPending(p); err != nil {
			t.Fatal(err)
		}
	}
	// A record that cannot be read is reported and removed, not fatal.
	_ = s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketPending).Put([]byte("junk"), []byte{1}) })
	got, bad, err := s.AllPending()
	if err != nil || len(got) != 2 || len(bad) != 1 {
		t.Fatalf("pending %v bad %v err %v", got, bad, err)
	}
	if !got[0].Received.Equal(now) || got[0].Probe == "" || got[0].Report.GetEpoch() != 9 {
		t.Errorf("decoded %+v", got[0])
	}
	if err := s.PutResult(&owlv1.PathStats{Path: "p", Epoch: 9}, true); err != nil {
		t.Fatal(err)
	}
	if got, bad, _ := s.AllPending(); len(got) != 0 || len(bad) != 0 {
		t.Errorf("final result left pending %v %v", got, bad)
	}
}

func TestColatePairsAndRetention(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	const budget = 1 << 30
	put := func(probe string, e int64, size int) {
		t.Helper()
		if _, err := s.PutColate(probe, &owlv1.ColateVector{Epoch: e, Packets: uint64(e), Vector: make([]byte, size)}, budget, -1<<62); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range []int64{1, 2, 4} {
		put("a", e, 100)
	}
	for _, e := range []int64{2, 3, 4, 5} {
		put("b", e, 100)
	}
	put("ab", 3, 100) // a probe whose name extends another's
	var walk []string
	err = s.ColatePairs("a", "b", 2, 4, func(e int64, va, vb *owlv1.ColateVector) (bool, error) {
		walk = append(walk, fmt.Sprintf("%d:%v/%v", e, va != nil, vb != nil))
		if va != nil && va.GetPackets() != uint64(e) || vb != nil && vb.GetPackets() != uint64(e) {
			t.Errorf("epoch %d got the vectors of epochs %d/%d", e, va.GetPackets(), vb.GetPackets())
		}
		return true, nil
	})
	if err != nil || strings.Join(walk, " ") != "2:true/true 3:false/true 4:true/true" {
		t.Errorf("walk %v, err %v", walk, err)
	}
	total := s.ColateBytes()
	if total < 8*100 {
		t.Fatalf("stored bytes %d", total)
	}
	put("a", 4, 100) // replacing a record does not count it twice
	if s.ColateBytes() != total {
		t.Errorf("replacing changed the total from %d to %d", total, s.ColateBytes())
	}
	s.Close()
	if s, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.ColateBytes() != total {
		t.Errorf("after reopening: %d bytes, want %d", s.ColateBytes(), total)
	}
	// A budget of about four records keeps the newest four.
	per := total / 8
	n, err := s.PutColate("c", &owlv1.ColateVector{Epoch: 6, Vector: make([]byte, 100)}, 4*per+per/2, -1<<62)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, p := range []string{"a", "ab", "b", "c"} {
		_ = s.ColateVectors(p, -100, 100, func(e int64, _ *owlv1.ColateVector, _ int) bool {
			left = append(left, fmt.Sprintf("%s%d", p, e))
			return true
		})
	}
	if n != 5 || strings.Join(left, " ") != "a4 b4 b5 c6" {
		t.Errorf("pruned %d, left %v", n, left)
	}
	// An age limit drops what is older whatever the budget.
	if n, _ := s.PutColate("c", &owlv1.ColateVector{Epoch: 7}, budget, 5); n != 2 {
		t.Errorf("age limit pruned %d records, want 2 (a4, b4)", n)
	}
}

// TestDeleteFlows: the epochs of the ranges go, of their path only (not
// of a path whose name starts with it), sketches and per-flow results.
func TestDeleteFlows(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var w Write
	for _, path := range []string{"p", "p2"} {
		for e := int64(1); e <= 6; e++ {
			w.LDS = append(w.LDS, LDSPair{EpochRef: EpochRef{Path: path, Epoch: e}, Up: []byte{1}, Down: []byte{2}})
			w.Flows = append(w.Flows, FlowResult{Hash: uint64(e), Stats: &owlv1.FlowStats{Path: path, Epoch: e}})
		}
	}
	if err := s.Apply(w); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteFlows("p", []EpochRange{{First: 2, Last: 3}, {First: 6, Last: 100}}); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]int64{"p": {1, 4, 5}, "p2": {1, 2, 3, 4, 5, 6}} {
		var got []int64
		if err := s.FlowEpochs(path, func(e int64) bool { got = append(got, e); return true }); err != nil {
			t.Fatal(err)
		}
		n := 0
		_ = s.FlowResults(path, 0, 100, func(uint64, *owlv1.FlowStats) bool { n++; return true })
		if !slices.Equal(got, want) || n != len(want) {
			t.Errorf("%s: sketches of %v and %d per-flow results, want %v", path, got, n, want)
		}
	}
}

// TestLDSRecords: a pair form and a pair of wire forms (what collectors
// stored before the pair form) are both read back as they were stored,
// by LDSPairs and by a replica's copy.
func TestLDSRecords(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	u, _ := lds.New(lds.Config{Rows: 1, Cols: 8, K: 1, Seed: 1})
	u.Insert(1, 2, 3, 1)
	pair, _ := lds.AppendPair(nil, u, u)
	wire, _ := u.MarshalBinary()
	stored := []LDSPair{
		{EpochRef: EpochRef{Path: "p", Epoch: 1}, Up: wire, Down: append([]byte{9}, wire...)},
		{EpochRef: EpochRef{Path: "p", Epoch: 2}, Pair: pair},
	}
	w := Write{LDS: stored}
	for _, p := range stored {
		w.Results = append(w.Results, &owlv1.PathStats{Path: p.Path, Epoch: p.Epoch})
	}
	if err := s.Apply(w); err != nil {
		t.Fatal(err)
	}
	var got []LDSPair
	if err := s.LDSPairs("p", 0, 10, func(p LDSPair) bool {
		got = append(got, LDSPair{EpochRef: p.EpochRef, Pair: bytes.Clone(p.Pair), Up: bytes.Clone(p.Up), Down: bytes.Clone(p.Down)})
		return true
	}); err != nil {
		t.Fatal(err)
	}
	copies, err := s.StoredEpochs("p", 0, 10, func(int64) bool { return false })
	if err != nil || len(copies) != 2 {
		t.Fatalf("stored epochs: %d, %v", len(copies), err)
	}
	for i, want := range stored {
		for _, p := range []LDSPair{got[i], *copies[i].LDS} {
			if p.EpochRef != want.EpochRef || !bytes.Equal(p.Pair, want.Pair) || !bytes.Equal(p.Up, want.Up) || !bytes.Equal(p.Down, want.Down) {
				t.Errorf("epoch %d: read back %+v, stored %+v", want.Epoch, p, want)
			}
		}
	}
}

// TestUpdateResultKeepsConflicts: UpdateResult changes a stored result;
// a result stored over it later keeps the higher conflicting_reports.
func TestUpdateResultKeepsConflicts(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r, err := s.UpdateResult("p", 1, func(*owlv1.PathStats) bool { return true }); r != nil || err != nil {
		t.Fatalf("no result: %v, %v", r, err)
	}
	r := &owlv1.PathStats{Path: "p", Epoch: 1, MeanNs: 5}
	if err := s.Apply(Write{Results: []*owlv1.PathStats{r}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.UpdateResult("p", 1, func(r *owlv1.PathStats) bool { r.ConflictingReports += 2; return true })
	if err != nil || got.GetConflictingReports() != 2 {
		t.Fatalf("updated %v, %v", got, err)
	}
	r.MeanNs = 6 // boundary matching re-stores it, from before the update
	if err := s.Apply(Write{Results: []*owlv1.PathStats{r}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Result("p", 1); got.GetConflictingReports() != 2 || got.GetMeanNs() != 6 || r.GetConflictingReports() != 0 {
		t.Errorf("re-stored %v (caller's copy %d conflicts)", got, r.GetConflictingReports())
	}
}

// boundaryEpochs is the epochs of path's boundary records in s.
func boundaryEpochs(t *testing.T, s *Store, path string) []int64 {
	t.Helper()
	var out []int64
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketBoundaryIndex).ForEach(func(k, _ []byte) error {
			if string(k[8:]) == path {
				out = append(out, int64(binary.BigEndian.Uint64(k)^(1<<63)))
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDroppedBoundaries: dropped boundary records are deleted in batches
// of dropBatch, on Close those not deleted yet, and after a stop without
// Close by PruneBoundaries; records not dropped stay.
func TestDroppedBoundaries(t *testing.T) {
	const keep, paths = 16, 8
	epochs := int64(dropBatch/paths + 40)
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	write := func(s *Store, path string, e int64) {
		w := Write{Boundaries: []Boundary{{EpochRef: EpochRef{Path: path, Epoch: e}, Data: []byte(path)}},
			DropBoundaries: []EpochRef{{Path: path, Epoch: e - keep}}}
		if err := s.Apply(w); err != nil {
			t.Fatal(err)
		}
	}
	kept := func(s *Store, when string, from, to int64) {
		t.Helper()
		for p := range paths {
			path := fmt.Sprintf("p%d", p)
			got := boundaryEpochs(t, s, path)
			if len(got) == 0 || got[0] < from || got[0] > to || got[len(got)-1] != epochs-1 {
				t.Errorf("%s: %s has records of epochs %v, want from [%d, %d] to %d", when, path, got, from, to, epochs-1)
			}
		}
	}
	for e := range epochs {
		for p := range paths {
			write(s, fmt.Sprintf("p%d", p), e)
		}
	}
	// One batch went (epochs up to about dropBatch/paths - keep), the
	// drops since wait.
	kept(s, "running", dropBatch/paths-keep, epochs-1-keep)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	kept(s, "closed and opened", epochs-keep, epochs-keep)
	// A stop without Close leaves dropped records behind.
	for e := epochs; e < epochs+10; e++ {
		write(s, "p0", e)
	}
	s.drops = nil
	n, err := s.PruneBoundaries(keep)
	if err != nil || n != 10 {
		t.Errorf("PruneBoundaries deleted %d records (%v), want 10", n, err)
	}
	if got := boundaryEpochs(t, s, "p0"); len(got) != keep || got[0] != epochs+10-keep {
		t.Errorf("p0 after PruneBoundaries: records of epochs %v, want the last %d", got, keep)
	}
	s.Close()
}
