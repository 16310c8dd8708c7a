package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// flowsOf is every stored per-flow result of a path, oldest epoch first.
func flowsOf(t *testing.T, s *Store, path string) []FlowResult {
	t.Helper()
	var out []FlowResult
	err := s.FlowResults(path, -1<<62, 1<<62, func(h uint64, f *owlv1.FlowStats) bool {
		out = append(out, FlowResult{Hash: h, Stats: f})
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sketchesOf is the upstream sketch bytes of each epoch of a path.
func sketchesOf(t *testing.T, s *Store, path string) map[int64][]byte {
	t.Helper()
	out := map[int64][]byte{}
	err := s.LDSPairs(path, -1<<62, 1<<62, func(p LDSPair) bool {
		out[p.Epoch] = bytes.Clone(p.Up)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func flow(path string, e int64, h uint64, pk float64) FlowResult {
	return FlowResult{Hash: h, Stats: &owlv1.FlowStats{Path: path, Epoch: e, Packets: pk}}
}

// TestFlowRecords: per-flow results come back by path range, by flow and
// one by one; a write with only sketches or only flows of an epoch keeps
// the other part, and flows written again replace the epoch's flows.
func TestFlowRecords(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := Write{
		Flows: []FlowResult{flow("p", 1, 10, 1), flow("p", 2, 10, 2), flow("p", 1, 11, 3), flow("q", 1, 10, 4)},
		LDS:   []LDSPair{{EpochRef: EpochRef{Path: "p", Epoch: 1}, Up: []byte{1}, Down: []byte{2}}},
	}
	if err := s.Apply(w); err != nil {
		t.Fatal(err)
	}
	got := flowsOf(t, s, "p")
	if len(got) != 3 || got[0].Hash != 10 || got[1].Hash != 11 || got[2].Stats.GetEpoch() != 2 {
		t.Fatalf("path p: %v, want epoch 1 hashes 10 and 11, then epoch 2", got)
	}
	var of []float64
	_ = s.FlowResultsOf("p", 0, 5, 10, func(f *owlv1.FlowStats) bool { of = append(of, f.GetPackets()); return true })
	if !slices.Equal(of, []float64{1, 2}) {
		t.Errorf("flow 10 of p: packets %v, want [1 2]", of)
	}
	if f, _ := s.FlowResult("p", 1, 11); f.GetPackets() != 3 {
		t.Errorf("flow 11 of p epoch 1: %v", f)
	}
	if f, _ := s.FlowResult("p", 1, 12); f != nil {
		t.Errorf("flow 12 was never stored, got %v", f)
	}
	// Sketches only: epoch 1 keeps its flows, epoch 2 gets a sketch.
	w = Write{LDS: []LDSPair{{EpochRef: EpochRef{Path: "p", Epoch: 1}, Up: []byte{5}}, {EpochRef: EpochRef{Path: "p", Epoch: 2}, Up: []byte{6}}}}
	if err := s.Apply(w); err != nil {
		t.Fatal(err)
	}
	if got := flowsOf(t, s, "p"); len(got) != 3 {
		t.Errorf("after sketches only: %d flows, want the 3 stored", len(got))
	}
	if sk := sketchesOf(t, s, "p"); len(sk) != 2 || !bytes.Equal(sk[1], []byte{5}) || !bytes.Equal(sk[2], []byte{6}) {
		t.Errorf("sketches %v, want epoch 1 [5] and epoch 2 [6]", sk)
	}
	// Flows only: epoch 1's flows replaced, its sketch kept.
	if err := s.Apply(Write{Flows: []FlowResult{flow("p", 1, 12, 5)}}); err != nil {
		t.Fatal(err)
	}
	if got := flowsOf(t, s, "p"); len(got) != 2 || got[0].Hash != 12 {
		t.Errorf("after epoch 1's flows were written again: %v, want its flow 12 and epoch 2's", got)
	}
	if sk := sketchesOf(t, s, "p"); !bytes.Equal(sk[1], []byte{5}) {
		t.Errorf("epoch 1's sketch %v after a write of flows only, want [5]", sk[1])
	}
	var eps []int64
	_ = s.FlowEpochs("p", func(e int64) bool { eps = append(eps, e); return true })
	if !slices.Equal(eps, []int64{1, 2}) {
		t.Errorf("epochs with per-flow data %v, want [1 2]", eps)
	}
}

// TestMigrateFlowData: a database of an older collector (a record per
// flow, sketches in a bucket of their own, boundary records path first)
// opens with every per-flow result and sketch in records of one epoch
// each and every boundary record readable, moved over several
// transactions, the old buckets gone.
func TestMigrateFlowData(t *testing.T) {
	defer func(n int) { migrateBatch = n }(migrateBatch)
	migrateBatch = 4
	want := map[string][]FlowResult{}
	wantLDS := map[string]map[int64][]byte{}
	s := openWritten(t, func(tx *bolt.Tx) error {
		fb, err := tx.CreateBucket(legacyFlows)
		if err != nil {
			return err
		}
		lb, err := tx.CreateBucket(legacyLDS)
		if err != nil {
			return err
		}
		bb, err := tx.CreateBucket(legacyBoundary)
		if err != nil {
			return err
		}
		for _, path := range []string{"p", "p2"} {
			wantLDS[path] = map[int64][]byte{}
			for e := int64(-1); e < 5; e++ {
				for h := uint64(1); h <= uint64(e+2); h++ {
					f := &owlv1.FlowStats{Path: path, Epoch: e, Packets: float64(h)}
					v, _ := proto.Marshal(f)
					if err := fb.Put(binary.BigEndian.AppendUint64(epochKey(path, e), h), v); err != nil {
						return err
					}
					want[path] = append(want[path], FlowResult{Hash: h, Stats: f})
				}
				if err := bb.Put(epochKey(path, e), []byte(path+"boundary")); err != nil {
					return err
				}
				if e%2 == 0 { // sketches of some epochs only
					up := []byte{byte(e), 7}
					wantLDS[path][e] = up
					if err := lb.Put(epochKey(path, e), ldsRecord(LDSPair{Up: up, Down: []byte{1}})); err != nil {
						return err
					}
				}
			}
		}
		return nil
	})
	for path, w := range want {
		got := flowsOf(t, s, path)
		same := len(got) == len(w)
		for i := 0; same && i < len(w); i++ {
			same = got[i].Hash == w[i].Hash && proto.Equal(got[i].Stats, w[i].Stats)
		}
		if !same {
			t.Errorf("%s: %d per-flow results after the move, want %d as stored", path, len(got), len(w))
		}
		sk := sketchesOf(t, s, path)
		if len(sk) != len(wantLDS[path]) {
			t.Errorf("%s: sketches of %d epochs, want %d", path, len(sk), len(wantLDS[path]))
		}
		for e := int64(-1); e < 5; e++ {
			if b, err := s.BoundaryData(path, e); err != nil || string(b) != path+"boundary" {
				t.Errorf("%s epoch %d: boundary record %q (%v) after the move", path, e, b, err)
			}
		}
		for e, up := range wantLDS[path] {
			if !bytes.Equal(sk[e], up) {
				t.Errorf("%s epoch %d: upstream sketch %v, want %v", path, e, sk[e], up)
			}
		}
	}
	_ = s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(legacyFlows) != nil || tx.Bucket(legacyLDS) != nil || tx.Bucket(legacyBoundary) != nil {
			t.Error("an old bucket is still there")
		}
		return nil
	})
}

// FuzzFlowRecord: any bytes read as a record give flows and a sketch or
// an error, never a panic or a part past the record's end; flows read
// and written again read back the same.
func FuzzFlowRecord(f *testing.F) {
	recs, _ := flowData([]LDSPair{{Pair: []byte("OWL")}}, []FlowResult{flow("p", 3, 7, 9), flow("p", 3, 8, 0)})
	f.Add(recs[0].val)
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		sketch, part, err := splitRecord(b)
		if err != nil {
			return
		}
		if len(sketch)+len(part) > len(b) {
			t.Fatalf("parts of %d and %d bytes in a record of %d", len(sketch), len(part), len(b))
		}
		_ = eachFlow(part, func(_ uint64, enc []byte) bool {
			if len(enc) > len(part) {
				t.Fatalf("a flow of %d bytes in a part of %d", len(enc), len(part))
			}
			return true
		})
		var fs []FlowResult
		_, _ = decodeFlows(nil, b, nil, func(h uint64, s *owlv1.FlowStats) bool {
			s.Path, s.Epoch = "x", 1
			fs = append(fs, FlowResult{Hash: h, Stats: s})
			return true
		})
		if len(fs) == 0 {
			return
		}
		again, err := flowData(nil, fs)
		if err != nil {
			t.Fatal(err)
		}
		var back []FlowResult
		v, err := again[0].encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeFlows(nil, v, nil, func(h uint64, s *owlv1.FlowStats) bool {
			back = append(back, FlowResult{Hash: h, Stats: s})
			return true
		}); err != nil || len(back) != len(fs) {
			t.Fatalf("re-encoded record: %d flows (%v), want %d", len(back), err, len(fs))
		}
		for i := range back {
			if back[i].Hash != fs[i].Hash || !proto.Equal(back[i].Stats, fs[i].Stats) {
				t.Fatalf("flow %d reads back as %v, want %v", i, back[i].Stats, fs[i].Stats)
			}
		}
	})
}

// dataKeys is the keys of bucket name of s.
func dataKeys(t *testing.T, s *Store, name []byte) [][]byte {
	t.Helper()
	var out [][]byte
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(name).ForEach(func(k, _ []byte) error {
			out = append(out, bytes.Clone(k))
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRecordsInWriteOrder: per-flow and boundary records written for
// epochs and paths in any order are stored one after the other, in the
// order written, and a record written again moves to the end.
func TestRecordsInWriteOrder(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	order := []EpochRef{{"q", 5}, {"p", 7}, {"q", 3}, {"p", 1}, {"q", 5}}
	for i, r := range order {
		w := Write{
			Flows:      []FlowResult{flow(r.Path, r.Epoch, 1, float64(i))},
			LDS:        []LDSPair{{EpochRef: r, Pair: []byte("OWL")}},
			Boundaries: []Boundary{{EpochRef: r, Data: []byte{byte(i)}}},
		}
		if err := s.Apply(w); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range [][]byte{bucketFlowData, bucketBoundaryData} {
		var seqs []uint64
		for _, k := range dataKeys(t, s, name) {
			if len(k) != 8 {
				t.Fatalf("%s: key %x is not a sequence number", name, k)
			}
			seqs = append(seqs, binary.BigEndian.Uint64(k))
		}
		// q 5 was written first and last: its first record is gone.
		if !slices.Equal(seqs, []uint64{2, 3, 4, 5}) {
			t.Errorf("%s: records %v, want 2 3 4 5 (the first replaced by the fifth)", name, seqs)
		}
	}
	if b, _ := s.BoundaryData("q", 5); !bytes.Equal(b, []byte{4}) {
		t.Errorf("q 5's boundary record %v, want the last written, [4]", b)
	}
	if f, _ := s.FlowResult("q", 5, 1); f.GetPackets() != 4 {
		t.Errorf("q 5's flow %v, want the last written (4 packets)", f)
	}
	if n, err := s.DeleteFlows("q", []EpochRange{{3, 5}}); err != nil || n != 2 {
		t.Errorf("deleting q's epochs 3-5: %d (%v), want 2", n, err)
	}
	if n := len(dataKeys(t, s, bucketFlowData)); n != 2 {
		t.Errorf("%d per-flow records after q's went, want p's 2", n)
	}
}

// TestPreviousLayout: a database of the collector before records were in
// write order (per-flow records under their epoch first, indexed with
// empty values; boundary records in "epoch-boundary" under their epoch
// first) opens with every record readable; a per-flow record written
// again or deleted leaves nothing under its old key, and the boundary
// records are moved.
func TestPreviousLayout(t *testing.T) {
	s := openWritten(t, func(tx *bolt.Tx) error {
		idx, err := tx.CreateBucket(bucketFlowIndex)
		if err != nil {
			return err
		}
		data, err := tx.CreateBucket(bucketFlowData)
		if err != nil {
			return err
		}
		bb, err := tx.CreateBucket(legacyEpochBoundary)
		if err != nil {
			return err
		}
		for e := int64(1); e <= 3; e++ {
			recs, err := flowData([]LDSPair{{EpochRef: EpochRef{Path: "p", Epoch: e}, Up: []byte{byte(e)}}}, []FlowResult{flow("p", e, 9, float64(e))})
			if err != nil {
				return err
			}
			k := epochKey("p", e)
			if err := errors.Join(idx.Put(k, nil), data.Put(dataKey(k), recs[0].val), bb.Put(dataKey(k), []byte{byte(e)})); err != nil {
				return err
			}
		}
		return nil
	})
	if got := flowsOf(t, s, "p"); len(got) != 3 || got[2].Stats.GetPackets() != 3 {
		t.Errorf("per-flow results %v, want epochs 1-3 as stored", got)
	}
	for e := int64(1); e <= 3; e++ {
		if b, err := s.BoundaryData("p", e); err != nil || !bytes.Equal(b, []byte{byte(e)}) {
			t.Errorf("epoch %d: boundary record %v (%v), want [%d]", e, b, err, e)
		}
	}
	// Epoch 1's flows written again (its sketch kept), epoch 2 deleted.
	if err := s.Apply(Write{Flows: []FlowResult{flow("p", 1, 9, 10)}}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteFlows("p", []EpochRange{{2, 2}}); err != nil || n != 1 {
		t.Fatalf("deleting epoch 2: %d (%v)", n, err)
	}
	if sk := sketchesOf(t, s, "p"); len(sk) != 2 || !bytes.Equal(sk[1], []byte{1}) {
		t.Errorf("sketches %v, want epoch 1's [1] kept and epoch 3's", sk)
	}
	if f, _ := s.FlowResult("p", 1, 9); f.GetPackets() != 10 {
		t.Errorf("epoch 1's flow %v, want the one written again", f)
	}
	keys := dataKeys(t, s, bucketFlowData)
	old := dataKey(epochKey("p", 3))
	if len(keys) != 2 || !bytes.Equal(keys[1], old) || len(keys[0]) != 8 {
		t.Errorf("per-flow records under %x, want epoch 1's sequence number and epoch 3's old key %x", keys, old)
	}
	_ = s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(legacyEpochBoundary) != nil {
			t.Error("bucket epoch-boundary is still there")
		}
		return nil
	})
}

// openWritten opens, as a Store, a database that write filled first as an
// older collector left it (bbolt alone: no bucket of the Store's yet).
func openWritten(t *testing.T, write func(tx *bolt.Tx) error) *Store {
	t.Helper()
	dir := t.TempDir()
	db, err := bolt.Open(filepath.Join(dir, "owl.db"), 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = errors.Join(db.Update(write), db.Close())
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
