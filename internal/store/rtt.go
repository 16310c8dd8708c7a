package store

import (
	"bytes"
	"fmt"
	"math"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// PutRTT stores a probe's RTT report of one epoch (replacing one stored
// for that epoch) and deletes the probe's reports of epochs before
// keepFrom.
func (s *Store) PutRTT(probe string, r *owlv1.RTTReport, keepFrom int64) error {
	v, err := proto.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding RTT report: %w", err)
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRTT)
		if err := b.Put(epochKey(probe, r.GetEpoch()), v); err != nil {
			return err
		}
		c := b.Cursor()
		start, end := epochKey(probe, math.MinInt64), epochKey(probe, keepFrom)
		for k, _ := c.Seek(start); k != nil && bytes.Compare(k, end) < 0; k, _ = c.Seek(start) {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
}

// RTTReports calls fn with a probe's RTT reports of epochs in [from, to],
// oldest first, until it returns false.
func (s *Store) RTTReports(probe string, from, to int64, fn func(*owlv1.RTTReport) bool) error {
	return s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketRTT).Cursor()
		end := epochKey(probe, to)
		for k, v := c.Seek(epochKey(probe, from)); k != nil && bytes.Compare(k, end) <= 0; k, v = c.Next() {
			r := &owlv1.RTTReport{}
			if err := proto.Unmarshal(v, r); err != nil {
				return fmt.Errorf("RTT report %x: %w", k, err)
			}
			if !fn(r) {
				return nil
			}
		}
		return nil
	})
}
