package store

import (
	"bytes"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Collectors before the per-flow records of flows.go kept sketches in
// bucket "lds" under the epoch's key, and per-flow results in bucket
// "flows" one per flow, under the epoch's key and the flow's hash.
// Boundary records were in bucket "boundary" under the epoch's key, then
// in bucket "epoch-boundary" under dataKey, before boundaryRecords.
var (
	legacyLDS           = []byte("lds")
	legacyFlows         = []byte("flows")
	legacyBoundary      = []byte("boundary")
	legacyEpochBoundary = []byte("epoch-boundary")
)

// migrateBatch is about how many old records one transaction moves.
var migrateBatch = 20000

// migrateFlowData moves the per-flow data and boundary records of a
// database an older collector wrote to their keys of now, a batch per
// transaction (a move cut short goes on at the next start), and drops
// the old buckets once empty.
func migrateFlowData(db *bolt.DB) error {
	for {
		done := false
		err := update(db, func(tx *bolt.Tx) error {
			n, err := moveLegacyFlows(tx)
			if err != nil || n > 0 {
				return err
			}
			if n, err = moveLegacyLDS(tx); err != nil || n > 0 {
				return err
			}
			if n, err = moveLegacyBoundaries(tx); err != nil || n > 0 {
				return err
			}
			done = true
			for _, name := range [][]byte{legacyFlows, legacyLDS, legacyBoundary, legacyEpochBoundary} {
				if tx.Bucket(name) != nil {
					if err := tx.DeleteBucket(name); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("moving per-flow data to one record per epoch: %w", err)
		}
		if done {
			return nil
		}
	}
}

// mergeInto adds to the record of epoch key ek a sketch (when not nil)
// and flow entries.
func mergeInto(tx *bolt.Tx, ek, sketch, flows []byte) error {
	fr := flowRecords(tx)
	s, f, err := splitRecord(fr.get(ek))
	if err != nil {
		return fmt.Errorf("per-flow data %x: %w", ek, err)
	}
	if sketch != nil {
		s = sketch
	}
	return fr.put(bytes.Clone(ek), joinRecord(s, append(bytes.Clone(f), flows...)))
}

// moveLegacyFlows moves whole epochs of old per-flow results, about
// migrateBatch of them, and returns how many it moved.
func moveLegacyFlows(tx *bolt.Tx) (int, error) {
	old := tx.Bucket(legacyFlows)
	if old == nil {
		return 0, nil
	}
	c := old.Cursor()
	n := 0
	var ek, part []byte
	for k, v := c.First(); k != nil; k, v = c.First() {
		if len(k) < 17 {
			if err := c.Delete(); err != nil {
				return n, err
			}
			continue
		}
		if e := k[:len(k)-8]; !bytes.Equal(e, ek) {
			if ek != nil {
				if err := mergeInto(tx, ek, nil, part); err != nil {
					return n, err
				}
			}
			if n >= migrateBatch {
				return n, nil
			}
			ek, part = bytes.Clone(e), nil
		}
		part = binary.BigEndian.AppendUint64(part, binary.BigEndian.Uint64(k[len(k)-8:]))
		part = binary.AppendUvarint(part, uint64(len(v)))
		part = append(part, v...)
		if err := c.Delete(); err != nil {
			return n, err
		}
		n++
	}
	if ek == nil {
		return n, nil
	}
	return n, mergeInto(tx, ek, nil, part)
}

// moveLegacyLDS moves up to migrateBatch old sketch records and returns
// how many it moved.
func moveLegacyLDS(tx *bolt.Tx) (int, error) {
	return moveRecords(tx, legacyLDS, func(k, v []byte) error {
		if len(v) == 0 {
			return nil
		}
		return mergeInto(tx, k, bytes.Clone(v), nil)
	})
}

// moveLegacyBoundaries moves up to migrateBatch old boundary records, of
// either old bucket, and returns how many it moved.
func moveLegacyBoundaries(tx *bolt.Tx) (int, error) {
	br := boundaryRecords(tx)
	n, err := moveRecords(tx, legacyBoundary, func(k, v []byte) error {
		return br.put(dataKey(k), bytes.Clone(v))
	})
	if err != nil || n > 0 {
		return n, err
	}
	return moveRecords(tx, legacyEpochBoundary, func(k, v []byte) error {
		return br.put(bytes.Clone(k), bytes.Clone(v))
	})
}

// moveRecords hands up to migrateBatch records of an old bucket keyed by
// epochKey or dataKey to put, deleting each, and returns how many it
// took. Keys too short to be an epoch's are dropped.
func moveRecords(tx *bolt.Tx, name []byte, put func(k, v []byte) error) (int, error) {
	old := tx.Bucket(name)
	if old == nil {
		return 0, nil
	}
	c := old.Cursor()
	n := 0
	for k, v := c.First(); k != nil && n < migrateBatch; k, v = c.First() {
		if len(k) >= 9 {
			if err := put(k, v); err != nil {
				return n, err
			}
		}
		if err := c.Delete(); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
