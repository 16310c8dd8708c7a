package store

import (
	"bytes"
	"fmt"
	"math"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// A probe's own data of each epoch (RTT reports, reordering reports) is
// kept in a bucket of its own, by probe and epoch, with the probe's
// older epochs deleted as each new one comes.

// putByEpoch stores a probe's message of one epoch in bucket (replacing
// one stored for that epoch) and deletes the probe's messages of epochs
// before keepFrom.
func (s *Store) putByEpoch(bucket []byte, what, probe string, epoch int64, m proto.Message, keepFrom int64) error {
	v, err := proto.Marshal(m)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", what, err)
	}
	return update(s.db, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		if err := b.Put(epochKey(probe, epoch), v); err != nil {
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

// eachByEpoch calls fn with a probe's messages of epochs in [from, to]
// in bucket, oldest first, until it returns false; newMsg makes an empty
// message to read one into.
func eachByEpoch[M proto.Message](s *Store, bucket []byte, what, probe string, from, to int64, newMsg func() M, fn func(M) bool) error {
	return s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucket).Cursor()
		end := epochKey(probe, to)
		for k, v := c.Seek(epochKey(probe, from)); k != nil && bytes.Compare(k, end) <= 0; k, v = c.Next() {
			m := newMsg()
			if err := proto.Unmarshal(v, m); err != nil {
				return fmt.Errorf("%s %x: %w", what, k, err)
			}
			if !fn(m) {
				return nil
			}
		}
		return nil
	})
}

// PutReorder stores a probe's reordering report of one epoch (replacing
// one stored for that epoch) and deletes the probe's reports of epochs
// before keepFrom.
func (s *Store) PutReorder(probe string, r *owlv1.ReorderReport, keepFrom int64) error {
	return s.putByEpoch(bucketReorder, "reordering report", probe, r.GetEpoch(), r, keepFrom)
}

// ReorderReports calls fn with a probe's reordering reports of epochs in
// [from, to], oldest first, until it returns false.
func (s *Store) ReorderReports(probe string, from, to int64, fn func(*owlv1.ReorderReport) bool) error {
	return eachByEpoch(s, bucketReorder, "reordering report", probe, from, to, func() *owlv1.ReorderReport { return &owlv1.ReorderReport{} }, fn)
}
