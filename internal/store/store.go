// Package store keeps the collector's state on disk in an embedded bbolt
// database: the reports still waiting for their other side, and the results
// of every path and epoch; in a cluster, also the copies of lone sides this
// collector keeps for another (replica.go). A restarted collector picks up
// where it stopped.
package store

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

var (
	bucketResults = []byte("results")
	bucketPending = []byte("pending")
	// Boundary records in the order they are written (seqRecords), and
	// their index under dataKey (the epoch first).
	bucketBoundaryIndex = []byte("boundary-index")
	bucketBoundaryData  = []byte("boundary-data")
	// Per-flow data (sketches and per-flow results) of each path's
	// epochs: flows.go.
	bucketFlowIndex = []byte("flow-index")
	bucketFlowData  = []byte("flow-data")
	// Copies of lone sides whose path another member owns, same keys as
	// pending: this member keeps the second copy of that path's state.
	bucketReplicaPending = []byte("replica-pending")
	// COLATE vectors by probe and epoch, and an index by epoch and probe
	// (value: the record's size) for retention.
	bucketColate     = []byte("colate")
	bucketColateTime = []byte("colate-time")
	// Probes' round-trip times (RTT reports) and TCP reordering by
	// prefix (reordering reports), by probe and epoch.
	bucketRTT     = []byte("rtt")
	bucketReorder = []byte("reorder")
)

// Store is the collector's database. Safe for concurrent use.
type Store struct {
	db *bolt.DB

	// commits groups the frequent small writes (pending reports, epoch
	// results) into shared transactions.
	commits groupCommit

	colateMu    sync.Mutex
	colateBytes int64 // size of the stored COLATE records

	// drops are the boundary records dropped (Write.DropBoundaries) and
	// not deleted yet: see takeDrops.
	dropMu sync.Mutex
	drops  []EpochRef
}

// dropBatch is how many dropped boundary records are deleted at once.
// Deleted one by one, each in the transaction of the write that dropped
// it, every record rewrote its leaf with the records beside it (a leaf
// holds two at least, of about 8 KB each): 21 KB written a path-epoch
// under owl-load. Records are stored in the order they were written, and
// indexed epoch first, so a batch of records dropped over a few epochs is
// a run of whole leaves in both, freed unwritten.
const dropBatch = 2048

// takeDrops adds drops to the records waiting to be deleted, and returns
// them all, sorted by key, once there are dropBatch of them.
func (s *Store) takeDrops(drops []EpochRef) []EpochRef {
	s.dropMu.Lock()
	defer s.dropMu.Unlock()
	s.drops = append(s.drops, drops...)
	if len(s.drops) < dropBatch {
		return nil
	}
	out := s.drops
	s.drops = nil
	slices.SortFunc(out, func(a, b EpochRef) int {
		return cmp.Or(cmp.Compare(a.Epoch, b.Epoch), strings.Compare(a.Path, b.Path))
	})
	return out
}

// PruneBoundaries deletes each path's boundary records older than keep
// epochs before its newest: those a collector that stopped without
// closing its store had dropped and not deleted yet (takeDrops). It
// returns how many it deleted.
func (s *Store) PruneBoundaries(keep int64) (int, error) {
	var old [][]byte
	err := s.db.View(func(tx *bolt.Tx) error {
		newest := map[string]int64{}
		c := tx.Bucket(bucketBoundaryIndex).Cursor()
		for k, _ := c.Last(); k != nil; k, _ = c.Prev() {
			if len(k) < 8 {
				continue
			}
			path, epoch := string(k[8:]), int64(binary.BigEndian.Uint64(k)^(1<<63))
			n, seen := newest[path]
			if !seen {
				newest[path] = epoch
			} else if epoch <= n-keep {
				old = append(old, bytes.Clone(k))
			}
		}
		return nil
	})
	if err != nil || len(old) == 0 {
		return 0, err
	}
	err = update(s.db, func(tx *bolt.Tx) error {
		br := boundaryRecords(tx)
		for _, k := range old {
			if err := br.delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return len(old), nil
}

// untakeDrops puts back records taken to be deleted by a write that
// failed.
func (s *Store) untakeDrops(drops []EpochRef) {
	if len(drops) == 0 {
		return
	}
	s.dropMu.Lock()
	s.drops = append(s.drops, drops...)
	s.dropMu.Unlock()
}

// Open opens (creating if needed) the database in dir.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating data directory: %w", err)
	}
	path := filepath.Join(dir, "owl.db")
	if fi, err := os.Stat(path); err == nil && fi.Size() == 0 {
		return nil, fmt.Errorf("%s is empty (0 bytes): it was truncated, and its history is gone; %s", path, damagedAdvice)
	}
	var db *bolt.DB
	err := guard(func() (err error) {
		db, err = bolt.Open(path, 0o644, &bolt.Options{Timeout: 5 * time.Second})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w; %s", path, err, damagedAdvice)
	}
	if err := guard(func() error { return check(db, path) }); err != nil {
		db.Close()
		return nil, fmt.Errorf("%s is damaged: %w; %s", path, err, damagedAdvice)
	}
	stale, err := digestsStale(db)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	err = update(db, func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketResults, bucketPending, bucketBoundaryIndex, bucketBoundaryData, bucketFlowIndex, bucketFlowData, bucketReplicaPending, bucketColate, bucketColateTime, bucketRTT, bucketReorder, bucketSizes} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		if stale && tx.Bucket(bucketDigests) != nil {
			// Dropped in the write that notes this collector: the
			// index is built again below, or at the next start.
			return tx.DeleteBucket(bucketDigests)
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("initialising %s: %w", path, err)
	}
	if err := migrateFlowData(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("upgrading %s: %w", path, err)
	}
	if err := buildDigests(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("indexing the results of %s: %w", path, err)
	}
	st := &Store{db: db}
	err = db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketColateTime).ForEach(func(_, v []byte) error {
			if len(v) == 8 {
				st.colateBytes += int64(binary.BigEndian.Uint64(v))
			}
			return nil
		})
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return st, nil
}

// damagedAdvice says what to do about a damaged database.
const damagedAdvice = "restore it from a backup, or move it away to start with no history (the probes send again what was not acknowledged)"

// check reads every page of the database (bbolt's consistency check),
// after making sure that every page it will read is inside the file: the
// check walks pages on a goroutine of bbolt's own, where a read past the
// end of a truncated file would be a fault guard cannot catch.
func check(db *bolt.DB, path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	return db.View(func(tx *bolt.Tx) error {
		if tx.Size() > fi.Size() {
			return fmt.Errorf("truncated: its pages need %d bytes, the file has %d", tx.Size(), fi.Size())
		}
		var errs []error
		for err := range tx.Check() {
			if len(errs) < 3 {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
}

// guard runs f on a goroutine of its own where a damaged file's faults (a
// page past the end of a truncated file) and panics (a page of garbage)
// become errors.
func guard(f func() error) error {
	done := make(chan error, 1)
	go func() {
		debug.SetPanicOnFault(true)
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("reading it failed: %v", r)
			}
		}()
		done <- f()
	}()
	return <-done
}

// Close deletes the dropped boundary records not deleted yet and closes
// the database.
func (s *Store) Close() error {
	s.dropMu.Lock()
	drops := s.drops
	s.drops = nil
	s.dropMu.Unlock()
	var err error
	if len(drops) > 0 {
		err = update(s.db, func(tx *bolt.Tx) error { return putBoundaries(tx, nil, drops, nil) })
	}
	return errors.Join(err, s.db.Close())
}

// Ping checks that the database answers.
func (s *Store) Ping() error { return s.db.View(func(*bolt.Tx) error { return nil }) }

// epochKey encodes path and epoch so that keys of a path sort by epoch.
func epochKey(path string, epoch int64) []byte {
	k := make([]byte, 0, len(path)+9)
	k = append(k, path...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, uint64(epoch)^(1<<63))
}

func pendingKey(path string, epoch int64, role owlv1.Role) []byte {
	return append(epochKey(path, epoch), byte(role))
}

// Pending is a stored report waiting for the other side of its path.
type Pending struct {
	Probe    string
	Received time.Time
	Report   *owlv1.EpochReport
}

// encode: received unix ns (8) | probe length (1) | probe | report proto.
func (p Pending) encode() ([]byte, error) {
	if len(p.Probe) > 255 {
		return nil, fmt.Errorf("probe id of %d bytes", len(p.Probe))
	}
	b := binary.BigEndian.AppendUint64(nil, uint64(p.Received.UnixNano()))
	b = append(b, byte(len(p.Probe)))
	b = append(b, p.Probe...)
	return proto.MarshalOptions{}.MarshalAppend(b, p.Report)
}

func decodePending(b []byte) (Pending, error) {
	if len(b) < 9 || len(b) < 9+int(b[8]) {
		return Pending{}, errors.New("pending record too short")
	}
	p := Pending{Received: time.Unix(0, int64(binary.BigEndian.Uint64(b))), Probe: string(b[9 : 9+int(b[8])])}
	p.Report = &owlv1.EpochReport{}
	if err := proto.Unmarshal(b[9+int(b[8]):], p.Report); err != nil {
		return Pending{}, err
	}
	return p, nil
}

// PutPending stores a report that waits for its other side.
func (s *Store) PutPending(p Pending) error {
	v, err := p.encode()
	if err != nil {
		return err
	}
	r := p.Report
	return s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPending).Put(pendingKey(r.GetPath(), r.GetEpoch(), r.GetRole()), v)
	})
}

// DeletePending forgets both sides of a path's epoch.
func (s *Store) DeletePending(path string, epoch int64) error {
	return s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPending)
		for _, role := range []owlv1.Role{owlv1.Role_ROLE_UPSTREAM, owlv1.Role_ROLE_DOWNSTREAM} {
			if err := b.Delete(pendingKey(path, epoch, role)); err != nil {
				return err
			}
		}
		return nil
	})
}

// AllPending returns every stored pending report. Unreadable records are
// returned as errors alongside the readable ones and removed.
func (s *Store) AllPending() ([]Pending, []error, error) {
	return s.allSides(bucketPending)
}

// allSides returns every side stored in a bucket of sides; unreadable
// records are returned as errors and removed.
func (s *Store) allSides(bucket []byte) ([]Pending, []error, error) {
	return readAll(s, bucket, func(_, v []byte) (Pending, error) { return decodePending(v) })
}

// readAll decodes every record of a bucket; unreadable records are
// returned as errors alongside the readable ones and removed.
func readAll[T any](s *Store, bucket []byte, decode func(k, v []byte) (T, error)) ([]T, []error, error) {
	var out []T
	var bad []error
	var badKeys [][]byte
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(k, v []byte) error {
			r, err := decode(k, v)
			if err != nil {
				bad = append(bad, fmt.Errorf("%s record %x: %w", bucket, k, err))
				badKeys = append(badKeys, bytes.Clone(k))
				return nil
			}
			out = append(out, r)
			return nil
		})
	})
	if err != nil {
		return nil, nil, err
	}
	if len(badKeys) > 0 {
		err = update(s.db, func(tx *bolt.Tx) error {
			for _, k := range badKeys {
				if err := tx.Bucket(bucket).Delete(k); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return out, bad, err
}

// PutResult stores a result, replacing any earlier one of the same path and
// epoch. With final set, the epoch's pending reports go in the same
// transaction.
func (s *Store) PutResult(r *owlv1.PathStats, final bool) error {
	v, err := proto.Marshal(r)
	if err != nil {
		return err
	}
	return update(s.db, func(tx *bolt.Tx) error {
		k := epochKey(r.GetPath(), r.GetEpoch())
		if err := putResult(tx, k, tx.Bucket(bucketResults).Get(k), v, r); err != nil {
			return err
		}
		if !final {
			return nil
		}
		b := tx.Bucket(bucketPending)
		for _, role := range []owlv1.Role{owlv1.Role_ROLE_UPSTREAM, owlv1.Role_ROLE_DOWNSTREAM} {
			if err := b.Delete(pendingKey(r.GetPath(), r.GetEpoch(), role)); err != nil {
				return err
			}
		}
		return nil
	})
}

// EpochRef names one epoch of one path.
type EpochRef struct {
	Path  string
	Epoch int64
}

// Boundary is an opaque record a path keeps per epoch for matching packets
// across epoch boundaries.
type Boundary struct {
	EpochRef
	Data []byte
}

// Write is a set of changes applied in one transaction.
type Write struct {
	Results    []*owlv1.PathStats
	Boundaries []Boundary
	// Done lists epochs whose pending reports are used up.
	Done []EpochRef
	// DropBoundaries lists boundary records no longer needed.
	DropBoundaries []EpochRef
	// Flows are per-flow results, each under its epoch and a hash of its
	// flow key.
	Flows []FlowResult
	// LDS are the two sides' sketches of epochs, kept for queries of any
	// flow (PruneFlows removes them).
	LDS []LDSPair
	// Keep, when set, is asked about each result that would replace a
	// stored one of the same epoch: true keeps the stored one, and the
	// stored boundary record with it.
	Keep func(stored, incoming *owlv1.PathStats) bool
	// ReplicaDone lists epochs whose copies of lone sides, kept for
	// another member, are used up; they go before ReplicaPending is added.
	ReplicaDone []EpochRef
	// ReplicaPending are copies of lone sides another member (the path's
	// owner) holds, kept in case it is gone for good.
	ReplicaPending []Pending
	// Sizes replace the stored sizes of their paths.
	Sizes []PathSizes
}

// Apply makes all changes of w or none.
func (s *Store) Apply(w Write) error {
	vals := make([][]byte, len(w.Results))
	for i, r := range w.Results {
		v, err := proto.Marshal(r)
		if err != nil {
			return err
		}
		vals[i] = v
	}
	recs, err := flowData(w.LDS, w.Flows)
	if err != nil {
		return err
	}
	replicas := make([][]byte, len(w.ReplicaPending))
	for i, p := range w.ReplicaPending {
		v, err := p.encode()
		if err != nil {
			return err
		}
		replicas[i] = v
	}
	sizes, err := encodeSizes(w.Sizes)
	if err != nil {
		return err
	}
	drops := s.takeDrops(w.DropBoundaries)
	err = s.update(func(tx *bolt.Tx) error {
		var kept map[EpochRef]bool
		var err error
		steps := []func() error{
			func() error { return putFlowData(tx, recs) },
			func() error { kept, err = putResults(tx, w.Results, vals, w.Keep); return err },
			func() error { return putBoundaries(tx, w.Boundaries, drops, kept) },
			func() error { return deleteSides(tx.Bucket(bucketPending), w.Done) },
			func() error { return deleteSides(tx.Bucket(bucketReplicaPending), w.ReplicaDone) },
			func() error { return putSides(tx.Bucket(bucketReplicaPending), w.ReplicaPending, replicas) },
			func() error { return putSizes(tx, w.Sizes, sizes) },
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.untakeDrops(drops)
	}
	return err
}

// putResults stores results (vals are their encodings), leaving a stored
// one in place where keep says so, and returns the epochs it left. A
// result that replaces a stored one keeps its conflicting_reports when
// the stored one counted more: the count is raised by UpdateResult, and a
// result computed before (boundary matching re-stores its neighbours)
// must not take it back.
func putResults(tx *bolt.Tx, rs []*owlv1.PathStats, vals [][]byte, keep func(stored, incoming *owlv1.PathStats) bool) (map[EpochRef]bool, error) {
	b := tx.Bucket(bucketResults)
	kept := map[EpochRef]bool{}
	for i, r := range rs {
		k := epochKey(r.GetPath(), r.GetEpoch())
		v := vals[i]
		old := b.Get(k)
		if old != nil {
			if keep != nil {
				stored := &owlv1.PathStats{}
				if err := proto.Unmarshal(old, stored); err == nil && keep(stored, r) {
					kept[EpochRef{Path: r.GetPath(), Epoch: r.GetEpoch()}] = true
					continue
				}
			}
			if n := conflictsOf(old); n > r.GetConflictingReports() {
				c := proto.CloneOf(r)
				c.ConflictingReports = n
				var err error
				if v, err = proto.Marshal(c); err != nil {
					return nil, err
				}
			}
		}
		if err := putResult(tx, k, old, v, r); err != nil {
			return nil, err
		}
	}
	return kept, nil
}

// conflictingReportsField is PathStats.conflicting_reports's number.
const conflictingReportsField = 34

// conflictsOf reads conflicting_reports from an encoded result without
// decoding the rest (0 when the encoding is damaged).
func conflictsOf(b []byte) uint32 {
	var n uint32
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return 0
		}
		b = b[l:]
		if num == conflictingReportsField && typ == protowire.VarintType {
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return 0
			}
			n = uint32(v)
			b = b[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(num, typ, b)
		if l < 0 {
			return 0
		}
		b = b[l:]
	}
	return n
}

// UpdateResult changes a stored result in one transaction: change is
// given the stored result (decoded anew each time it runs) and says
// whether to store it back. It returns the result as stored, or nil when
// there is none or change left it.
func (s *Store) UpdateResult(path string, epoch int64, change func(*owlv1.PathStats) bool) (*owlv1.PathStats, error) {
	var out *owlv1.PathStats
	err := s.update(func(tx *bolt.Tx) error {
		out = nil
		b := tx.Bucket(bucketResults)
		k := epochKey(path, epoch)
		old := b.Get(k)
		if old == nil {
			return nil
		}
		r := &owlv1.PathStats{}
		if err := proto.Unmarshal(old, r); err != nil {
			return fmt.Errorf("result of %q epoch %d: %w", path, epoch, err)
		}
		if !change(r) {
			return nil
		}
		v, err := proto.Marshal(r)
		if err != nil {
			return err
		}
		out = r
		return putResult(tx, k, old, v, r)
	})
	return out, err
}

// putBoundaries stores boundary records, but not those of the epochs in
// kept (whose stored results stayed), then drops those in drop.
func putBoundaries(tx *bolt.Tx, bs []Boundary, drop []EpochRef, kept map[EpochRef]bool) error {
	br := boundaryRecords(tx)
	for _, x := range bs {
		if kept[x.EpochRef] {
			continue // the stored result stays, and its record with it
		}
		if err := br.put(dataKey(epochKey(x.Path, x.Epoch)), x.Data); err != nil {
			return err
		}
	}
	for _, d := range drop {
		if err := br.delete(dataKey(epochKey(d.Path, d.Epoch))); err != nil {
			return err
		}
	}
	return nil
}

// boundaryRecords is the transaction's boundary records.
func boundaryRecords(tx *bolt.Tx) seqRecords {
	return newSeqRecords(tx, bucketBoundaryIndex, bucketBoundaryData, nil)
}

// deleteSides deletes both sides of each epoch from a bucket of sides.
func deleteSides(b *bolt.Bucket, epochs []EpochRef) error {
	for _, d := range epochs {
		for _, role := range []owlv1.Role{owlv1.Role_ROLE_UPSTREAM, owlv1.Role_ROLE_DOWNSTREAM} {
			if err := b.Delete(pendingKey(d.Path, d.Epoch, role)); err != nil {
				return err
			}
		}
	}
	return nil
}

// putSides stores sides (vals are their encodings) in a bucket of sides.
func putSides(b *bolt.Bucket, ps []Pending, vals [][]byte) error {
	for i, p := range ps {
		r := p.Report
		if err := b.Put(pendingKey(r.GetPath(), r.GetEpoch(), r.GetRole()), vals[i]); err != nil {
			return err
		}
	}
	return nil
}

// BoundaryData returns an epoch's boundary record, or nil.
func (s *Store) BoundaryData(path string, epoch int64) ([]byte, error) {
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		out = bytes.Clone(boundaryRecords(tx).get(dataKey(epochKey(path, epoch))))
		return nil
	})
	return out, err
}

// Result returns the stored result of a path's epoch, if any.
func (s *Store) Result(path string, epoch int64) (*owlv1.PathStats, error) {
	var out *owlv1.PathStats
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketResults).Get(epochKey(path, epoch))
		if v == nil {
			return nil
		}
		out = &owlv1.PathStats{}
		return proto.Unmarshal(v, out)
	})
	return out, err
}

// Results returns a path's results for epochs in [from, to], oldest first,
// at most limit of them (the newest when there are more). It reads from
// the newest end, so that asking for the latest few costs no more than
// those few however long the path's history.
func (s *Store) Results(path string, from, to int64, limit int) ([]*owlv1.PathStats, error) {
	var out []*owlv1.PathStats
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketResults).Cursor()
		start, end := epochKey(path, from), epochKey(path, to)
		k, v := c.Seek(end)
		if k == nil {
			k, v = c.Last()
		} else if bytes.Compare(k, end) > 0 {
			k, v = c.Prev()
		}
		for ; k != nil && bytes.Compare(k, start) >= 0 && len(out) < limit; k, v = c.Prev() {
			r := &owlv1.PathStats{}
			if err := proto.Unmarshal(v, r); err != nil {
				return fmt.Errorf("result %x: %w", k, err)
			}
			out = append(out, r)
		}
		return nil
	})
	slices.Reverse(out)
	return out, err
}

// A COLATE record is the vector's message without its vector, length
// first, then the vector's bytes: reading one hands out the vector without
// copying it (it lives in the database's memory map for the transaction).
func encodeColate(v *owlv1.ColateVector) ([]byte, error) {
	meta := proto.CloneOf(v)
	meta.Vector = nil
	mb, err := proto.Marshal(meta)
	if err != nil {
		return nil, err
	}
	out := binary.AppendUvarint(make([]byte, 0, len(mb)+len(v.GetVector())+10), uint64(len(mb)))
	out = append(out, mb...)
	return append(out, v.GetVector()...), nil
}

// decodeColate reads a record; the vector aliases b.
func decodeColate(k, b []byte) (*owlv1.ColateVector, error) {
	n, used := binary.Uvarint(b)
	if used <= 0 || uint64(len(b)-used) < n {
		return nil, fmt.Errorf("colate record %x is malformed", k)
	}
	m := &owlv1.ColateVector{}
	if err := proto.Unmarshal(b[used:used+int(n)], m); err != nil {
		return nil, fmt.Errorf("colate record %x: %w", k, err)
	}
	m.Vector = b[used+int(n):]
	return m, nil
}

// colateTimeKey orders COLATE records by epoch, then probe.
func colateTimeKey(probe string, epoch int64) []byte {
	k := binary.BigEndian.AppendUint64(nil, uint64(epoch)^(1<<63))
	return append(k, probe...)
}

// PutColate stores a probe's COLATE vector of an epoch (replacing one
// stored before), then deletes the oldest records, of any probe, until the
// stored total is at most maxBytes and none is older than epoch minEpoch.
// It returns how many records went.
func (s *Store) PutColate(probe string, v *owlv1.ColateVector, maxBytes int64, minEpoch int64) (int, error) {
	b, err := encodeColate(v)
	if err != nil {
		return 0, err
	}
	s.colateMu.Lock()
	defer s.colateMu.Unlock()
	total := s.colateBytes
	pruned := 0
	err = update(s.db, func(tx *bolt.Tx) error {
		data, idx := tx.Bucket(bucketColate), tx.Bucket(bucketColateTime)
		key, tkey := epochKey(probe, v.GetEpoch()), colateTimeKey(probe, v.GetEpoch())
		if old := idx.Get(tkey); len(old) == 8 {
			total -= int64(binary.BigEndian.Uint64(old))
		}
		size := int64(len(b) + len(key) + len(tkey) + 8)
		if err := data.Put(key, b); err != nil {
			return err
		}
		if err := idx.Put(tkey, binary.BigEndian.AppendUint64(nil, uint64(size))); err != nil {
			return err
		}
		total += size
		c := idx.Cursor()
		for k, sz := c.First(); len(k) >= 8; k, sz = c.First() {
			e := int64(binary.BigEndian.Uint64(k[:8]) ^ (1 << 63))
			if total <= maxBytes && e >= minEpoch {
				break
			}
			if bytes.Equal(k, tkey) {
				break // never the record just stored
			}
			if err := data.Delete(epochKey(string(k[8:]), e)); err != nil {
				return err
			}
			if err := c.Delete(); err != nil {
				return err
			}
			if len(sz) == 8 {
				total -= int64(binary.BigEndian.Uint64(sz))
			}
			pruned++
		}
		return nil
	})
	if err == nil {
		s.colateBytes = total
	}
	return pruned, err
}

// ColateBytes is the size of every stored COLATE record.
func (s *Store) ColateBytes() int64 {
	s.colateMu.Lock()
	defer s.colateMu.Unlock()
	return s.colateBytes
}

// ColatePairs walks the epochs in [from, to] for which probe a or probe b
// has a stored COLATE vector, oldest first, calling fn with both (nil for
// a probe without one) until fn returns false or an error. The vectors'
// bytes are the database's own: valid only during the call, not to be
// changed.
func (s *Store) ColatePairs(a, b string, from, to int64, fn func(epoch int64, va, vb *owlv1.ColateVector) (bool, error)) error {
	return s.db.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketColate)
		ca, cb := bk.Cursor(), bk.Cursor()
		endA, endB := epochKey(a, to), epochKey(b, to)
		ka, xa := ca.Seek(epochKey(a, from))
		kb, xb := cb.Seek(epochKey(b, from))
		decode := func(k, v []byte) (int64, *owlv1.ColateVector, error) {
			m, err := decodeColate(k, v)
			if err != nil {
				return 0, nil, err
			}
			return int64(binary.BigEndian.Uint64(k[len(k)-8:]) ^ (1 << 63)), m, nil
		}
		for {
			okA := ka != nil && bytes.Compare(ka, endA) <= 0
			okB := kb != nil && bytes.Compare(kb, endB) <= 0
			if !okA && !okB {
				return nil
			}
			var ea, eb int64
			var va, vb *owlv1.ColateVector
			var err error
			if okA {
				if ea, va, err = decode(ka, xa); err != nil {
					return err
				}
			}
			if okB {
				if eb, vb, err = decode(kb, xb); err != nil {
					return err
				}
			}
			e := ea
			switch {
			case okA && okB && ea == eb:
				ka, xa = ca.Next()
				kb, xb = cb.Next()
			case okA && (!okB || ea < eb):
				vb = nil
				ka, xa = ca.Next()
			default:
				e, va = eb, nil
				kb, xb = cb.Next()
			}
			more, err := fn(e, va, vb)
			if err != nil || !more {
				return err
			}
		}
	})
}

// ColateVectors calls fn for a probe's stored COLATE vectors of epochs in
// [from, to], oldest first, with each record's size, until it returns
// false. As with ColatePairs, the vectors are valid only during the call.
func (s *Store) ColateVectors(probe string, from, to int64, fn func(epoch int64, v *owlv1.ColateVector, size int) bool) error {
	return s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketColate).Cursor()
		end := epochKey(probe, to)
		for k, x := c.Seek(epochKey(probe, from)); k != nil && bytes.Compare(k, end) <= 0; k, x = c.Next() {
			m, err := decodeColate(k, x)
			if err != nil {
				return err
			}
			if !fn(int64(binary.BigEndian.Uint64(k[len(k)-8:])^(1<<63)), m, len(x)) {
				return nil
			}
		}
		return nil
	})
}
