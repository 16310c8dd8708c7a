package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// bucketSizes keeps, by path, the synopsis sizes the path's probes were
// last told: a restarted collector tells them the same, not its defaults.
var bucketSizes = []byte("path-sizes")

// PathSizes are the sizes a path's probes were last told: RDA buckets,
// LDA rows, LDS shape and whether it is off, sampling rate, in the
// PathAssignment fields they travel in (its path and role unset). Setting
// fingerprints the configuration they were chosen under: sizes chosen
// under another mean nothing.
type PathSizes struct {
	Path    string
	Setting uint64
	Sizes   *owlv1.PathAssignment
}

// maxSizesRecord bounds a stored record: a handful of varints.
const maxSizesRecord = 256

// encode: the setting (8 bytes, big-endian), then Sizes' wire form.
func (p PathSizes) encode() ([]byte, error) {
	b := binary.BigEndian.AppendUint64(nil, p.Setting)
	return proto.MarshalOptions{}.MarshalAppend(b, p.Sizes)
}

func decodePathSizes(path string, b []byte) (PathSizes, error) {
	if len(b) < 8 || len(b) > maxSizesRecord {
		return PathSizes{}, fmt.Errorf("sizes record of %d bytes, want 8 to %d", len(b), maxSizesRecord)
	}
	p := PathSizes{Path: path, Setting: binary.BigEndian.Uint64(b), Sizes: &owlv1.PathAssignment{}}
	if err := proto.Unmarshal(b[8:], p.Sizes); err != nil {
		return PathSizes{}, err
	}
	return p, nil
}

// putSizes stores sizes (vals are their encodings), one record a path.
func putSizes(tx *bolt.Tx, sizes []PathSizes, vals [][]byte) error {
	b := tx.Bucket(bucketSizes)
	for i, p := range sizes {
		if err := b.Put([]byte(p.Path), vals[i]); err != nil {
			return err
		}
	}
	return nil
}

// encodeSizes encodes sizes for putSizes, before the transaction.
func encodeSizes(sizes []PathSizes) ([][]byte, error) {
	vals := make([][]byte, len(sizes))
	for i, p := range sizes {
		if p.Path == "" {
			return nil, errors.New("sizes record without a path")
		}
		v, err := p.encode()
		if err != nil {
			return nil, fmt.Errorf("encoding the sizes of path %q: %w", p.Path, err)
		}
		vals[i] = v
	}
	return vals, nil
}

// AllPathSizes returns the stored sizes of every path. Unreadable records
// are returned as errors alongside the readable ones and removed.
func (s *Store) AllPathSizes() ([]PathSizes, []error, error) {
	return readAll(s, bucketSizes, func(k, v []byte) (PathSizes, error) { return decodePathSizes(string(k), v) })
}
