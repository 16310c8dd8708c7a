package collector

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

func TestMergeResults(t *testing.T) {
	at := func(s int) *timestamppb.Timestamp { return timestamppb.New(time.Unix(int64(s), 0)) }
	ok := owlv1.ResultStatus_RESULT_STATUS_OK
	missing := owlv1.ResultStatus_RESULT_STATUS_MISSING_DOWNSTREAM
	// Epoch 1: the old owner's complete result beats the new owner's
	// later one that misses a side. Epoch 2: of two complete, the newer.
	a := []*owlv1.PathStats{{Epoch: 1, Status: ok, Computed: at(10), MeanNs: 1}, {Epoch: 2, Status: ok, Computed: at(10), MeanNs: 2}}
	b := []*owlv1.PathStats{{Epoch: 1, Status: missing, Computed: at(20)}, {Epoch: 2, Status: ok, Computed: at(20), MeanNs: 3}, {Epoch: 3, Status: ok, MeanNs: 4}}
	got := mergeResults([][]*owlv1.PathStats{b, a}, 10)
	if len(got) != 3 || got[0].GetMeanNs() != 1 || got[1].GetMeanNs() != 3 || got[2].GetEpoch() != 3 {
		t.Fatalf("merged %v", got)
	}
	if got := mergeResults([][]*owlv1.PathStats{a, b}, 2); len(got) != 2 || got[0].GetEpoch() != 2 {
		t.Errorf("limit 2 keeps %v, want the newest two epochs", got)
	}
}

func TestMergeProbes(t *testing.T) {
	at := func(s int) *timestamppb.Timestamp { return timestamppb.New(time.Unix(int64(s), 0)) }
	got := mergeProbes([][]*owlv1.ProbeInfo{
		{{ProbeId: "a", Connected: true, Version: "old", LastSeen: at(1), Reports: 5}},
		{{ProbeId: "a", Version: "new", LastSeen: at(2), Reports: 7}, {ProbeId: "b"}},
	})
	if len(got) != 2 || got[0].GetProbeId() != "a" || !got[0].GetConnected() || got[0].GetVersion() != "new" || got[0].GetReports() != 12 {
		t.Errorf("merged %v", got)
	}
}
