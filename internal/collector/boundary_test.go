package collector

import (
	"maps"
	"testing"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// TestBoundaryCopies: an extra packet counted as a duplicate (its probe
// saw a copy before the boundary) stays a duplicate unless the epoch
// before lost it, which makes it a late copy: matched across the
// boundary, it counts as delivered there and is no duplicate. The copies
// survive the store, and a record without copies reads as before.
func TestBoundaryCopies(t *testing.T) {
	prev := &boundary{epoch: 1, lost: map[uint64]int64{10: 100}, extra: map[uint64]int64{},
		n: 4, sumNS: 400, sqNS: 40_000, res: &owlv1.PathStats{Status: owlv1.ResultStatus_RESULT_STATUS_OK, Lost: 1}}
	next := &boundary{epoch: 2, lost: map[uint64]int64{}, extra: map[uint64]int64{10: 150, 11: 160, 12: 170},
		copies: map[uint64]bool{10: true, 11: true}, res: &owlv1.PathStats{Duplicates: 2, Reordered: 1}}

	stored, err := decodeBoundary(2, next.encode(), next.res)
	if err != nil || !maps.Equal(stored.copies, next.copies) || !maps.Equal(stored.extra, next.extra) {
		t.Fatalf("stored record: copies %v, extra %v, err %v; want %v, %v", stored.copies, stored.extra, err, next.copies, next.extra)
	}
	none := &boundary{lost: map[uint64]int64{1: 2}, extra: map[uint64]int64{3: 4}}
	if b, err := decodeBoundary(2, none.encode(), &owlv1.PathStats{}); err != nil || b.copies != nil || len(b.extra) != 1 {
		t.Fatalf("record without copies: %+v, %v", b, err)
	}

	if !prev.match(stored) {
		t.Fatal("nothing matched")
	}
	if prev.res.GetLost() != 0 || prev.res.GetBoundaryMatched() != 1 || prev.res.GetMeanNs() != 90 {
		t.Errorf("epoch before: lost %v, matched %d, mean %v; want 0, 1, 90", prev.res.GetLost(), prev.res.GetBoundaryMatched(), prev.res.GetMeanNs())
	}
	if next.res.GetDuplicates() != 1 || next.res.GetReordered() != 1 || !maps.Equal(stored.copies, map[uint64]bool{11: true}) {
		t.Errorf("epoch after: %d duplicates, %d reordered, copies %v; want 1, 1, [11]", next.res.GetDuplicates(), next.res.GetReordered(), stored.copies)
	}
}
