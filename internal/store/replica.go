package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// In a cluster, each path's state is kept by two members: its owner and
// the next by rendezvous hashing (the replica). The replica stores the
// owner's results, per-flow results, sketches and boundary records in the
// same buckets as its own (Apply), and copies of the owner's lone sides
// in a bucket of their own, replica-pending, with the keys of pending:
// they are not this member's to pair until it owns the path.

// AllReplicaPending returns every stored copy of a lone side. Unreadable
// records are returned as errors alongside the readable ones and removed.
func (s *Store) AllReplicaPending() ([]Pending, []error, error) {
	return s.allSides(bucketReplicaPending)
}

// TakeReplicaSide returns and deletes the stored copy of one side of a
// path's epoch; nil when there is none.
func (s *Store) TakeReplicaSide(path string, epoch int64, role owlv1.Role) (*Pending, error) {
	var out *Pending
	err := update(s.db, func(tx *bolt.Tx) error {
		b, k := tx.Bucket(bucketReplicaPending), pendingKey(path, epoch, role)
		v := b.Get(k)
		if v == nil {
			return nil
		}
		p, err := decodePending(v)
		if err != nil {
			return fmt.Errorf("replica-pending record %x: %w", k, err)
		}
		out = &p
		return b.Delete(k)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeleteReplicaSide forgets the copy of one side of a path's epoch.
func (s *Store) DeleteReplicaSide(path string, epoch int64, role owlv1.Role) error {
	return update(s.db, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketReplicaPending).Delete(pendingKey(path, epoch, role))
	})
}

// PruneReplicaPending deletes the copies of sides received before
// before, and returns how many went.
func (s *Store) PruneReplicaPending(before time.Time) (int, error) {
	n := 0
	err := update(s.db, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketReplicaPending)
		var old [][]byte
		err := b.ForEach(func(k, v []byte) error {
			if len(v) < 8 || int64(binary.BigEndian.Uint64(v)) < before.UnixNano() {
				old = append(old, bytes.Clone(k))
			}
			return nil
		})
		for _, k := range old {
			if err == nil {
				err = b.Delete(k)
			}
		}
		n = len(old)
		return err
	})
	return n, err
}

// keyEpoch is the epoch at the end of an epochKey.
func keyEpoch(k []byte) int64 { return int64(binary.BigEndian.Uint64(k[len(k)-8:]) ^ (1 << 63)) }

// StoredEpoch is what the store holds of one path's epoch with a result.
type StoredEpoch struct {
	Result   *owlv1.PathStats
	Flows    []FlowResult
	LDS      *LDSPair // nil when there are no sketches
	Boundary []byte   // nil when there is no boundary record
}

// StoredEpochs returns the epochs of a path from epoch from on that have
// a result and that skip leaves in, oldest first, at most limit of them,
// each with its per-flow results, sketches and boundary record. Fewer
// than limit means there are no more.
func (s *Store) StoredEpochs(path string, from int64, limit int, skip func(epoch int64) bool) ([]StoredEpoch, error) {
	var out []StoredEpoch
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketResults).Cursor()
		end := epochKey(path, math.MaxInt64)
		for k, v := c.Seek(epochKey(path, from)); k != nil && bytes.Compare(k, end) <= 0 && len(out) < limit; k, v = c.Next() {
			if skip(keyEpoch(k)) {
				continue
			}
			se, err := storedEpoch(tx, k, v)
			if err != nil {
				return err
			}
			out = append(out, se)
		}
		return nil
	})
	return out, err
}

// storedEpoch reads what goes with the result v stored under k.
func storedEpoch(tx *bolt.Tx, k, v []byte) (StoredEpoch, error) {
	se := StoredEpoch{Result: &owlv1.PathStats{}}
	if err := proto.Unmarshal(v, se.Result); err != nil {
		return se, fmt.Errorf("result %x: %w", k, err)
	}
	var err error
	if se.Flows, se.LDS, err = epochFlowData(tx, k); err != nil {
		return se, err
	}
	se.Boundary = bytes.Clone(boundaryRecords(tx).get(dataKey(k)))
	return se, nil
}
