package store

import (
	"encoding/binary"

	bolt "go.etcd.io/bbolt"
)

// seqRecords keeps large records in the order they are written: each
// record is stored in data under a sequence number (8 bytes, big endian,
// data's NextSequence), and idx maps the record's own key to it.
//
// Per-flow records and boundary records were stored under their epoch
// first, then their path. A path-epoch's records land among those of
// its epoch written by earlier commits, and a leaf holds two records at
// least (bbolt's minimum), so each write rewrote its neighbours: under
// owl-load, 30 KB written per path-epoch for a 10 KB per-flow record, and
// 21 KB for a 7.8 KB boundary record. Under sequence numbers, a commit's
// records go to the end of data, onto pages of their own, and only idx's
// small entries land among others.
type seqRecords struct {
	idx, data *bolt.Bucket
	// legacy, when set, is where the record of key k is in data when idx
	// has no sequence number for it: a record stored before.
	legacy func(k []byte) []byte
}

func newSeqRecords(tx *bolt.Tx, idx, data []byte, legacy func(k []byte) []byte) seqRecords {
	r := seqRecords{idx: tx.Bucket(idx), data: tx.Bucket(data), legacy: legacy}
	if r.data != nil {
		r.data.FillPercent = 1 // written at the end only: fill whole pages
	}
	return r
}

// at is the key in data of the record of key k whose index value is v,
// or nil if it has none.
func (r seqRecords) at(k, v []byte) []byte {
	if len(v) == 8 {
		return v
	}
	if r.legacy != nil {
		return r.legacy(k)
	}
	return nil
}

// get returns the record of key k, or nil. It is valid during the
// transaction only.
func (r seqRecords) get(k []byte) []byte {
	if d := r.at(k, r.idx.Get(k)); d != nil {
		return r.data.Get(d)
	}
	return nil
}

// put stores v as the record of key k, in place of any stored before.
// v must stay unchanged until the transaction ends.
func (r seqRecords) put(k, v []byte) error {
	if d := r.at(k, r.idx.Get(k)); d != nil {
		if err := r.data.Delete(d); err != nil {
			return err
		}
	}
	seq, err := r.data.NextSequence()
	if err != nil {
		return err
	}
	d := binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq)
	if err := r.data.Put(d, v); err != nil {
		return err
	}
	return r.idx.Put(k, d)
}

// delete deletes the record of key k, if any.
func (r seqRecords) delete(k []byte) error {
	if d := r.at(k, r.idx.Get(k)); d != nil {
		if err := r.data.Delete(d); err != nil {
			return err
		}
	}
	return r.idx.Delete(k)
}
