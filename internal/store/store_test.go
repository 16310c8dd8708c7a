package store

import (
	"testing"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
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
