package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/synopsis/lds"
)

// The per-flow data of a path's epoch, its sketch pair and its per-flow
// results, are one record in bucketFlowData, in the order they are
// written (seqRecords); bucketFlowIndex has each record's epochKey, with
// its key in bucketFlowData as the value, for reading a path's epochs in
// order. An index entry with an empty value is of a record stored by an
// older collector, under dataKey (the epoch first, then the path).
//
// A record is
//
//	sketch length (uvarint) | sketch pair (ldsRecord; none: length 0) |
//	per flow: hash (8 bytes, big endian) | length (uvarint) | FlowStats

// FlowResult is a per-flow result and the hash its key is stored under.
type FlowResult struct {
	Hash  uint64
	Stats *owlv1.FlowStats
}

// LDSPair is the two sides' LDS of one path and epoch: Pair in the pair
// form (lds.AppendPair), or, as collectors stored them before it, Up and
// Down, each side's wire form.
type LDSPair struct {
	EpochRef
	Pair     []byte
	Up, Down []byte
}

// ldsRecord is how a record holds p: the pair form, or the upstream's
// length and then both wire forms. A sketch of the second kind starts
// with a length: never the pair form's envelope.
func ldsRecord(p LDSPair) []byte {
	if p.Pair != nil {
		return p.Pair
	}
	v := binary.AppendUvarint(nil, uint64(len(p.Up)))
	return append(append(v, p.Up...), p.Down...)
}

// parseLDS reads the sketch part v of the record of epoch key k.
func parseLDS(k, v []byte) (LDSPair, error) {
	p := LDSPair{EpochRef: EpochRef{Path: string(k[:len(k)-9]), Epoch: keyEpoch(k)}}
	if lds.IsPair(v) {
		p.Pair = v
		return p, nil
	}
	n, m := binary.Uvarint(v)
	if m <= 0 || uint64(len(v)-m) < n {
		return p, fmt.Errorf("lds record %x is malformed", k)
	}
	p.Up, p.Down = v[m:m+int(n)], v[m+int(n):]
	return p, nil
}

// dataKey is the epoch-first key of the epoch whose epochKey is k.
func dataKey(k []byte) []byte {
	n := len(k) - 9
	return append(bytes.Clone(k[n+1:]), k[:n]...)
}

// splitRecord returns a record's sketch part and per-flow part.
func splitRecord(v []byte) (sketch, flows []byte, err error) {
	if len(v) == 0 {
		return nil, nil, nil
	}
	n, m := binary.Uvarint(v)
	if m <= 0 || n > uint64(len(v)-m) {
		return nil, nil, errors.New("per-flow record has a bad sketch length")
	}
	return v[m : m+int(n)], v[m+int(n):], nil
}

// joinRecord makes a record of its two parts.
func joinRecord(sketch, flows []byte) []byte {
	v := binary.AppendUvarint(make([]byte, 0, 10+len(sketch)+len(flows)), uint64(len(sketch)))
	return append(append(v, sketch...), flows...)
}

// maxFlowEntry bounds what one flow's encoding may claim to be, so that a
// damaged length is an error, not an allocation.
const maxFlowEntry = 1 << 20

// eachFlow calls fn with the hash and encoding of each flow of a per-flow
// part until fn returns false.
func eachFlow(v []byte, fn func(hash uint64, enc []byte) bool) error {
	for len(v) > 0 {
		if len(v) < 9 {
			return errors.New("per-flow record cut short")
		}
		h := binary.BigEndian.Uint64(v)
		n, m := binary.Uvarint(v[8:])
		if m <= 0 || n > maxFlowEntry || n > uint64(len(v)-8-m) {
			return errors.New("per-flow record has a bad flow length")
		}
		start := 8 + m
		if !fn(h, v[start:start+int(n)]) {
			return nil
		}
		v = v[start+int(n):]
	}
	return nil
}

// decodeFlows calls fn with each flow of the record v of epoch key k,
// decoded, until fn returns false; want, when set, says which flows to
// decode. It reports whether fn asked for more.
func decodeFlows(k, v []byte, want func(hash uint64) bool, fn func(hash uint64, f *owlv1.FlowStats) bool) (bool, error) {
	_, part, err := splitRecord(v)
	more := true
	var derr error
	if err == nil {
		err = eachFlow(part, func(h uint64, enc []byte) bool {
			if want != nil && !want(h) {
				return true
			}
			f := &owlv1.FlowStats{}
			if derr = proto.Unmarshal(enc, f); derr != nil {
				return false
			}
			more = fn(h, f)
			return more
		})
	}
	if err = errors.Join(err, derr); err != nil {
		return false, fmt.Errorf("per-flow results %x: %w", k, err)
	}
	return more, nil
}

// flowRecord is what a Write stores of one epoch's per-flow data: a part
// it does not have stays as stored.
type flowRecord struct {
	key       []byte // epochKey
	sketch    []byte
	hasSketch bool
	flows     []FlowResult
	// val is the record, encoded before the transaction: whole when r
	// has both parts, else as if none were stored (merged when one is).
	val []byte
}

// flowData groups a Write's sketches and per-flow results by epoch, and
// encodes the records that have both.
func flowData(ps []LDSPair, fs []FlowResult) ([]*flowRecord, error) {
	var out []*flowRecord
	at := map[EpochRef]*flowRecord{}
	rec := func(ref EpochRef) *flowRecord {
		r := at[ref]
		if r == nil {
			r = &flowRecord{key: epochKey(ref.Path, ref.Epoch)}
			at[ref] = r
			out = append(out, r)
		}
		return r
	}
	for _, p := range ps {
		r := rec(p.EpochRef)
		r.sketch, r.hasSketch = ldsRecord(p), true
	}
	for _, f := range fs {
		r := rec(EpochRef{Path: f.Stats.GetPath(), Epoch: f.Stats.GetEpoch()})
		r.flows = append(r.flows, f)
	}
	for _, r := range out {
		var err error
		if r.val, err = r.encode(nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// encode makes the record of r, in one allocation; flows, when r has
// none, is a stored per-flow part to keep.
func (r *flowRecord) encode(flows []byte) ([]byte, error) {
	n := binary.MaxVarintLen64 + len(r.sketch) + len(flows)
	sizes := make([]int, len(r.flows))
	for i, f := range r.flows {
		sizes[i] = proto.Size(f.Stats) // cached for MarshalAppend below
		n += 8 + binary.MaxVarintLen64 + sizes[i]
	}
	v := binary.AppendUvarint(make([]byte, 0, n), uint64(len(r.sketch)))
	v = append(append(v, r.sketch...), flows...)
	for i, f := range r.flows {
		v = binary.BigEndian.AppendUint64(v, f.Hash)
		v = binary.AppendUvarint(v, uint64(sizes[i]))
		var err error
		if v, err = (proto.MarshalOptions{UseCachedSize: true}).MarshalAppend(v, f.Stats); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// flowRecords is the transaction's per-flow records.
func flowRecords(tx *bolt.Tx) seqRecords {
	return newSeqRecords(tx, bucketFlowIndex, bucketFlowData, dataKey)
}

// putFlowData stores records, keeping the stored part of an epoch that a
// record does not have.
func putFlowData(tx *bolt.Tx, recs []*flowRecord) error {
	fr := flowRecords(tx)
	for _, r := range recs {
		v, err := r.val, error(nil)
		if !r.hasSketch || len(r.flows) == 0 {
			if stored := fr.get(r.key); stored != nil {
				v, err = r.merged(stored)
			}
		}
		if err != nil {
			return fmt.Errorf("per-flow data %x: %w", r.key, err)
		}
		if err := fr.put(r.key, v); err != nil {
			return err
		}
	}
	return nil
}

// merged is the record of r with the part it does not have from the
// stored record.
func (r *flowRecord) merged(stored []byte) ([]byte, error) {
	s, f, err := splitRecord(stored)
	if err != nil {
		return nil, err
	}
	c := *r
	if !c.hasSketch {
		c.sketch = s
	}
	if len(c.flows) > 0 {
		f = nil
	}
	return c.encode(f)
}

// eachRecord calls fn with the epoch key and record of each epoch of a
// path in [from, to] that has per-flow data, oldest first, until fn
// returns false.
func eachRecord(tx *bolt.Tx, path string, from, to int64, fn func(k, v []byte) (bool, error)) error {
	fr := flowRecords(tx)
	c := fr.idx.Cursor()
	end := epochKey(path, to)
	for k, at := c.Seek(epochKey(path, from)); k != nil && bytes.Compare(k, end) <= 0; k, at = c.Next() {
		more, err := fn(k, fr.data.Get(fr.at(k, at)))
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// FlowResults returns the per-flow results of a path for epochs in
// [from, to], calling fn for each until it returns false.
func (s *Store) FlowResults(path string, from, to int64, fn func(hash uint64, f *owlv1.FlowStats) bool) error {
	return s.db.View(func(tx *bolt.Tx) error {
		return eachRecord(tx, path, from, to, func(k, v []byte) (bool, error) {
			return decodeFlows(k, v, nil, fn)
		})
	})
}

// FlowResultsOf calls fn with the stored results of the flow with hash
// hash in epochs from..to, in epoch order, until fn returns false.
func (s *Store) FlowResultsOf(path string, from, to int64, hash uint64, fn func(f *owlv1.FlowStats) bool) error {
	want := func(h uint64) bool { return h == hash }
	return s.db.View(func(tx *bolt.Tx) error {
		return eachRecord(tx, path, from, to, func(k, v []byte) (bool, error) {
			return decodeFlows(k, v, want, func(_ uint64, f *owlv1.FlowStats) bool { return fn(f) })
		})
	})
}

// FlowResult returns one stored per-flow result, or nil.
func (s *Store) FlowResult(path string, epoch int64, hash uint64) (*owlv1.FlowStats, error) {
	var out *owlv1.FlowStats
	err := s.FlowResultsOf(path, epoch, epoch, hash, func(f *owlv1.FlowStats) bool {
		out = f
		return false
	})
	return out, err
}

// LDSPairs calls fn with the stored sketches of a path's epochs in
// [from, to], oldest first, until it returns false. The pair's bytes are
// valid only during the call.
func (s *Store) LDSPairs(path string, from, to int64, fn func(p LDSPair) bool) error {
	return s.db.View(func(tx *bolt.Tx) error {
		return eachRecord(tx, path, from, to, func(k, v []byte) (bool, error) {
			sketch, _, err := splitRecord(v)
			if err != nil {
				return false, fmt.Errorf("per-flow data %x: %w", k, err)
			}
			if len(sketch) == 0 {
				return true, nil
			}
			p, err := parseLDS(k, sketch)
			if err != nil {
				return false, err
			}
			return fn(p), nil
		})
	})
}

// FlowEpochs calls fn with each epoch of a path that has stored per-flow
// data, oldest first, until it returns false. It reads keys only.
func (s *Store) FlowEpochs(path string, fn func(epoch int64) bool) error {
	return s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketFlowIndex).Cursor()
		end := epochKey(path, math.MaxInt64)
		for k, _ := c.Seek(epochKey(path, math.MinInt64)); k != nil && bytes.Compare(k, end) <= 0; k, _ = c.Next() {
			if !fn(keyEpoch(k)) {
				return nil
			}
		}
		return nil
	})
}

// epochFlowData reads what a replica's copy takes of an epoch's per-flow
// data (k: its epochKey), copied out of the transaction.
func epochFlowData(tx *bolt.Tx, k []byte) ([]FlowResult, *LDSPair, error) {
	v := flowRecords(tx).get(k)
	var fs []FlowResult
	if _, err := decodeFlows(k, v, nil, func(h uint64, f *owlv1.FlowStats) bool {
		fs = append(fs, FlowResult{Hash: h, Stats: f})
		return true
	}); err != nil {
		return nil, nil, err
	}
	sketch, _, _ := splitRecord(v)
	if len(sketch) == 0 {
		return fs, nil, nil
	}
	p, err := parseLDS(k, bytes.Clone(sketch))
	if err != nil {
		return nil, nil, err
	}
	return fs, &p, nil
}

// EpochRange is the epochs from First to Last, both included.
type EpochRange struct{ First, Last int64 }

// DeleteFlows deletes a path's sketches and per-flow results of the
// epochs in the ranges, in one transaction, and returns how many epochs'
// data went.
func (s *Store) DeleteFlows(path string, ranges []EpochRange) (int, error) {
	n := 0
	err := update(s.db, func(tx *bolt.Tx) error {
		n = 0
		for _, r := range ranges {
			if r.First > r.Last {
				continue
			}
			m, err := deleteFlowData(tx, epochKey(path, r.First), epochKey(path, r.Last))
			n += m
			if err != nil {
				return err
			}
		}
		return nil
	})
	return n, err
}

// PruneFlows deletes a path's sketches and per-flow results of epochs
// before epoch, and returns how many epochs' data went.
func (s *Store) PruneFlows(path string, epoch int64) (int, error) {
	n := 0
	if epoch == math.MinInt64 {
		return 0, nil
	}
	err := update(s.db, func(tx *bolt.Tx) error {
		var err error
		n, err = deleteFlowData(tx, epochKey(path, math.MinInt64), epochKey(path, epoch-1))
		return err
	})
	return n, err
}

// deleteFlowData deletes the per-flow data of the epoch keys in
// [start, end].
func deleteFlowData(tx *bolt.Tx, start, end []byte) (int, error) {
	fr := flowRecords(tx)
	c := fr.idx.Cursor()
	n := 0
	for k, at := c.Seek(start); k != nil && bytes.Compare(k, end) <= 0; k, at = c.Seek(start) {
		if err := fr.data.Delete(fr.at(k, at)); err != nil {
			return n, err
		}
		if err := c.Delete(); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
