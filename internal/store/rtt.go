package store

import (
	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// PutRTT stores a probe's RTT report of one epoch (replacing one stored
// for that epoch) and deletes the probe's reports of epochs before
// keepFrom.
func (s *Store) PutRTT(probe string, r *owlv1.RTTReport, keepFrom int64) error {
	return s.putByEpoch(bucketRTT, "RTT report", probe, r.GetEpoch(), r, keepFrom)
}

// RTTReports calls fn with a probe's RTT reports of epochs in [from, to],
// oldest first, until it returns false.
func (s *Store) RTTReports(probe string, from, to int64, fn func(*owlv1.RTTReport) bool) error {
	return eachByEpoch(s, bucketRTT, "RTT report", probe, from, to, func() *owlv1.RTTReport { return &owlv1.RTTReport{} }, fn)
}
