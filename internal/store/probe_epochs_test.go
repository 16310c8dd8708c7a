package store

import (
	"testing"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// TestReorderReportsKept: a probe's reordering reports are read back by
// range, oldest first; one stored again for an epoch replaces it;
// retention deletes the probe's older epochs and no other probe's; RTT
// reports of the same epochs are kept apart.
func TestReorderReportsKept(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	put := func(probe string, e int64, packets uint64, keep int64) {
		t.Helper()
		r := &owlv1.ReorderReport{Epoch: e, Other: &owlv1.ReorderStats{Packets: packets}}
		if err := s.PutReorder(probe, r, keep); err != nil {
			t.Fatal(err)
		}
	}
	for e := int64(-2); e <= 5; e++ {
		put("a", e, uint64(10+e), -100)
		put("b", e, 1, -100)
	}
	put("a", 3, 99, -100)
	if err := s.PutRTT("a", &owlv1.RTTReport{Epoch: 4}, 0); err != nil {
		t.Fatal(err)
	}
	read := func(probe string, from, to int64) (epochs []int64, packets []uint64) {
		t.Helper()
		err := s.ReorderReports(probe, from, to, func(r *owlv1.ReorderReport) bool {
			epochs, packets = append(epochs, r.GetEpoch()), append(packets, r.GetOther().GetPackets())
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		return epochs, packets
	}
	if e, p := read("a", -1, 3); len(e) != 5 || e[0] != -1 || e[4] != 3 || p[4] != 99 || p[0] != 9 {
		t.Errorf("epochs %v, packets %v", e, p)
	}
	put("a", 6, 16, 4)
	if e, _ := read("a", -10, 10); len(e) != 3 || e[0] != 4 {
		t.Errorf("after retention: epochs %v, want 4 to 6", e)
	}
	if e, _ := read("b", -10, 10); len(e) != 8 {
		t.Errorf("probe b: epochs %v, want its 8", e)
	}
	n := 0
	_ = s.RTTReports("a", -10, 10, func(*owlv1.RTTReport) bool { n++; return true })
	if n != 1 {
		t.Errorf("%d RTT reports, want 1", n)
	}
}
