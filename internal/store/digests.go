package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// The digest index holds, per path and block of DigestBlock epochs, the
// sum of ResultDigest over the block's stored results, kept up to date by
// every write of a result. Members of a cluster compare these sums to
// find what one lacks (catch-up): read from the results, each comparison
// decoded every result a path ever stored, 86,400 a day of 1 s epochs, on
// both members and for every path they hold.
var bucketDigests = []byte("result-digests")

// DigestBlock is the length, in epochs, of the blocks of the digest
// index.
const DigestBlock = 256

// ResultDigest digests what tells two copies of a result apart: what
// boundary matching changes, and what differs between members that
// computed the epoch from different sides.
func ResultDigest(r *owlv1.PathStats) uint64 {
	h := fnv.New64a()
	var b []byte
	for _, v := range []uint64{uint64(r.GetEpoch()), uint64(r.GetStatus()), r.GetSamples(), math.Float64bits(r.GetLost()),
		r.GetBoundaryMatched(), r.GetReordered(), math.Float64bits(r.GetMeanNs())} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	h.Write(b)
	return h.Sum64()
}

// storedDigest is the digest of an encoded stored result; 0 for none, or
// for one that does not decode (it counts for nothing anywhere).
func storedDigest(v []byte) uint64 {
	if v == nil {
		return 0
	}
	r := &owlv1.PathStats{}
	if proto.Unmarshal(v, r) != nil {
		return 0
	}
	return ResultDigest(r)
}

// addDigest adds delta (wrapping) to the index of the block of path that
// holds epoch.
func addDigest(tx *bolt.Tx, path string, epoch int64, delta uint64) error {
	b := tx.Bucket(bucketDigests)
	k := epochKey(path, BlockOf(epoch, DigestBlock))
	var sum uint64
	if v := b.Get(k); len(v) == 8 {
		sum = binary.LittleEndian.Uint64(v)
	}
	return b.Put(k, binary.LittleEndian.AppendUint64(make([]byte, 0, 8), sum+delta))
}

// putResult stores the encoded result v of r under k, where old (nil:
// none) was stored, and moves the digest index with it.
func putResult(tx *bolt.Tx, k, old, v []byte, r *owlv1.PathStats) error {
	if err := addDigest(tx, r.GetPath(), r.GetEpoch(), ResultDigest(r)-storedDigest(old)); err != nil {
		return err
	}
	return tx.Bucket(bucketResults).Put(k, v)
}

// bucketWriter holds, under writerKey, the bbolt transaction of the
// latest write of a collector that keeps the digest index (update). A
// later transaction in the database's meta page is a write of an older
// collector, which stored results without moving the index: Open then
// builds the index again.
var (
	bucketWriter = []byte("digest-index-writer")
	writerKey    = []byte("tx")
)

// update runs fn in a write transaction of db, and notes the transaction
// as one of a collector that keeps the digest index.
func update(db *bolt.DB, fn func(*bolt.Tx) error) error {
	return db.Update(func(tx *bolt.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		b, err := tx.CreateBucketIfNotExists(bucketWriter)
		if err != nil {
			return err
		}
		return b.Put(writerKey, binary.BigEndian.AppendUint64(nil, uint64(tx.ID())))
	})
}

// digestsStale says whether a collector that did not keep the digest
// index wrote to db after the latest that did. A database without the
// note was last written by collectors before it, which kept the index or
// had none.
func digestsStale(db *bolt.DB) (stale bool, err error) {
	err = db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketWriter); b != nil {
			v := b.Get(writerKey)
			stale = len(v) != 8 || binary.BigEndian.Uint64(v) != uint64(tx.ID())
		}
		return nil
	})
	return stale, err
}

// buildDigests makes the digest index of a database that has none (a
// collector before it wrote the database, or Open dropped a stale one)
// from its results.
func buildDigests(db *bolt.DB) error {
	return update(db, func(tx *bolt.Tx) error {
		if tx.Bucket(bucketDigests) != nil {
			return nil
		}
		if _, err := tx.CreateBucket(bucketDigests); err != nil {
			return err
		}
		sums := map[string]uint64{}
		err := tx.Bucket(bucketResults).ForEach(func(k, v []byte) error {
			if len(k) < 9 {
				return nil
			}
			path := string(k[:len(k)-9])
			sums[string(epochKey(path, BlockOf(keyEpoch(k), DigestBlock)))] += storedDigest(v)
			return nil
		})
		if err != nil {
			return err
		}
		b := tx.Bucket(bucketDigests)
		for k, sum := range sums {
			if err := b.Put([]byte(k), binary.LittleEndian.AppendUint64(nil, sum)); err != nil {
				return err
			}
		}
		return nil
	})
}

// Digests returns, for each block of DigestBlock epochs of a path that
// has stored results (keyed by its first epoch), the sum of ResultDigest
// over them.
func (s *Store) Digests(path string) (map[int64]uint64, error) {
	out := map[int64]uint64{}
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketDigests).Cursor()
		end := epochKey(path, math.MaxInt64)
		for k, v := c.Seek(epochKey(path, math.MinInt64)); k != nil && bytes.Compare(k, end) <= 0; k, v = c.Next() {
			if len(v) != 8 {
				return fmt.Errorf("digest index %x: %d bytes", k, len(v))
			}
			out[keyEpoch(k)] = binary.LittleEndian.Uint64(v)
		}
		return nil
	})
	return out, err
}

// EpochDigests returns the ResultDigest of each stored result of a path
// from epoch from on, by epoch.
func (s *Store) EpochDigests(path string, from int64) (map[int64]uint64, error) {
	out := map[int64]uint64{}
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketResults).Cursor()
		end := epochKey(path, math.MaxInt64)
		for k, v := c.Seek(epochKey(path, from)); k != nil && bytes.Compare(k, end) <= 0; k, v = c.Next() {
			r := &owlv1.PathStats{}
			if err := proto.Unmarshal(v, r); err != nil {
				return fmt.Errorf("result %x: %w", k, err)
			}
			out[keyEpoch(k)] = ResultDigest(r)
		}
		return nil
	})
	return out, err
}

// BlockOf is the first epoch of the block of blockLen epochs that holds
// epoch.
func BlockOf(epoch, blockLen int64) int64 {
	b := epoch / blockLen * blockLen
	if b > epoch {
		b -= blockLen
	}
	return b
}
