package probe

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/synopsis"
	"github.com/owl-latency/owl/internal/synopsis/rda"
)

// entry is one packet as a probe's cache keeps it: its ID and timestamp
// (to repair the RDA) and its flow hash and weight (to repair the LDS), in
// 24 bytes: the offset (< 2^42 ns, over an hour) and the weight (< 2^22)
// share a word.
type entry struct {
	id   uint64
	flow uint64
	offW uint64 // offset ns << 22 | weight
}

const entryBytes = 24

func newEntry(id, flow uint64, offsetNS int64, weight uint64) entry {
	return entry{id: id, flow: flow, offW: uint64(offsetNS)<<22 | weight&(1<<22-1)}
}

func (e entry) offsetNS() int64 { return int64(e.offW >> 22) }
func (e entry) weight() uint32  { return uint32(e.offW & (1<<22 - 1)) }

// A cache grows in chunks: appends never copy what is already stored,
// and chunks hold no pointers for the garbage collector to scan. The
// first chunk holds firstChunkEntries, each next one twice as many, up to
// chunkEntries: a small epoch costs little.
const (
	firstChunkEntries = 1 << 10
	chunkEntries      = 1 << 16
)

// fullChunks recycles chunks of chunkEntries: at high rates an epoch's
// cache is tens of MiB, and fresh memory costs a page fault every 4 KiB.
var fullChunks sync.Pool // of *[]entry

// newChunk returns an empty chunk of capacity size.
func newChunk(size int) []entry {
	if size == chunkEntries {
		if p, ok := fullChunks.Get().(*[]entry); ok {
			return (*p)[:0]
		}
	}
	return make([]entry, 0, size)
}

// recycleChunks gives the full-size chunks back for later caches.
func recycleChunks(chunks [][]entry) {
	for _, ch := range chunks {
		if cap(ch) == chunkEntries {
			ch = ch[:0]
			fullChunks.Put(&ch)
		}
	}
}

// epochCache is the (ID, timestamp) list of one path and epoch. It is
// appended to on the capture goroutine while the epoch is open and only
// read after: flattened and sorted by ID the first time a request needs it.
type epochCache struct {
	rda      rda.Config // hashing of the path's RDAs (buckets vary)
	complete bool       // false when the cache hit its size limit

	mu      sync.Mutex
	chunks  [][]entry // while filling
	n       int       // entries in chunks
	entries []entry   // flattened and sorted, once asked for
	sorted  bool
}

// add appends an entry, unless the cache holds max already.
func (c *epochCache) add(e entry, max int) {
	if c.n >= max {
		c.complete = false
		return
	}
	if n := len(c.chunks); n == 0 || len(c.chunks[n-1]) == cap(c.chunks[n-1]) {
		size := chunkEntries
		if n < 6 {
			size = min(firstChunkEntries<<n, chunkEntries)
		}
		c.chunks = append(c.chunks, newChunk(size))
	}
	last := &c.chunks[len(c.chunks)-1]
	*last = append(*last, e)
	c.n++
}

// appendAll adds o's entries (merging workers' caches).
func (c *epochCache) appendAll(o *epochCache) {
	c.chunks = append(c.chunks, o.chunks...)
	c.n += o.n
	c.complete = c.complete && o.complete
}

// len is the number of entries.
func (c *epochCache) len() int { return c.n }

// each calls f for every entry, in no particular order.
func (c *epochCache) each(f func(entry)) {
	for _, ch := range c.chunks {
		for _, e := range ch {
			f(e)
		}
	}
	for _, e := range c.entries {
		f(e)
	}
}

// lookup returns every entry of the given IDs, sorted by ID and time
// (an ID cached twice is returned twice; an ID not cached is not
// returned).
func (c *epochCache) lookup(ids []uint64) []entry {
	out := c.find(ids)
	slices.SortFunc(out, func(a, b entry) int { return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(a.offW, b.offW)) })
	return out
}

// find is lookup in no particular order. Until something needs the
// cache sorted, it scans the chunks for the IDs: one pass costs less
// than sorting the cache.
func (c *epochCache) find(ids []uint64) []entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []entry
	if !c.sorted {
		// Most entries are not asked for: an open-addressed index of
		// the IDs answers that in half a Go map's time
		// (BenchmarkCacheFind).
		want := synopsis.NewIndex(len(ids))
		for _, id := range ids {
			want.Add(id)
		}
		for _, ch := range c.chunks {
			for _, e := range ch {
				if _, ok := want.Find(e.id); ok {
					out = append(out, e)
				}
			}
		}
		return out
	}
	for _, id := range ids {
		i, _ := slices.BinarySearchFunc(c.entries, id, func(e entry, id uint64) int {
			switch {
			case e.id < id:
				return -1
			case e.id > id:
				return 1
			}
			return 0
		})
		for ; i < len(c.entries) && c.entries[i].id == id; i++ {
			out = append(out, c.entries[i])
		}
	}
	return out
}

// repeated returns every entry whose ID occurs more than once.
func (c *epochCache) repeated() []entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sort()
	return repeatedIn(c.entries, func(e entry) uint64 { return e.id })
}

// repeatedIn returns the elements of s, sorted by ID, whose ID occurs
// more than once.
func repeatedIn[T any](s []T, id func(T) uint64) []T {
	var out []T
	for i := 0; i < len(s); {
		j := i + 1
		for j < len(s) && id(s[j]) == id(s[i]) {
			j++
		}
		if j-i > 1 {
			out = append(out, s[i:j]...)
		}
		i = j
	}
	return out
}

// sort flattens the chunks into entries sorted by ID, once; c.mu is held.
func (c *epochCache) sort() {
	if !c.sorted {
		c.entries = sortByID(c.chunks, c.n)
		recycleChunks(c.chunks)
		c.chunks = nil
		c.sorted = true
	}
}

// recycle gives the cache's chunks back once no one will read it: it is
// empty after.
func (c *epochCache) recycle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	recycleChunks(c.chunks)
	c.chunks, c.entries, c.n = nil, nil, 0
}

// radixMin is the number of entries from which sortByID scatters them
// by their IDs' top bits first.
const radixMin = 1 << 16

// sortByID returns the n entries of chunks in one slice sorted by ID.
// Many entries are first scattered by the top 16 bits of their IDs (one
// counting pass, one moving pass); IDs are keyed hashes, uniform, so each
// of the 65,536 runs then holds a handful to sort. At a million entries
// it takes a third of the time of a comparison sort (BenchmarkSortCache).
func sortByID(chunks [][]entry, n int) []entry {
	byID := func(a, b entry) int { return cmp.Compare(a.id, b.id) }
	if n < radixMin {
		out := make([]entry, 0, n)
		for _, ch := range chunks {
			out = append(out, ch...)
		}
		slices.SortFunc(out, byID)
		return out
	}
	const shift = 64 - 16
	starts := make([]int, 1<<16+1)
	for _, ch := range chunks {
		for _, e := range ch {
			starts[e.id>>shift+1]++
		}
	}
	for i := 1; i < len(starts); i++ {
		starts[i] += starts[i-1]
	}
	out := make([]entry, n)
	next := slices.Clone(starts[:1<<16])
	for _, ch := range chunks {
		for _, e := range ch {
			d := e.id >> shift
			out[next[d]] = e
			next[d]++
		}
	}
	for d := range 1 << 16 {
		run := out[starts[d]:starts[d+1]]
		if len(run) > 32 {
			slices.SortFunc(run, byID)
			continue
		}
		for i := 1; i < len(run); i++ { // insertion sort: a handful
			for j := i; j > 0 && run[j].id < run[j-1].id; j-- {
				run[j], run[j-1] = run[j-1], run[j]
			}
		}
	}
	return out
}

// rebuild makes the epoch's RDA again with another bucket count.
func (c *epochCache) rebuild(buckets int) (*rda.RDA, error) {
	cfg := c.rda
	cfg.Buckets = buckets
	r, err := rda.New(cfg)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// In batches, as the pipeline inserts: one Insert after another
	// waited for each bucket's load in turn.
	var b rdaBatch
	c.each(func(e entry) { b.add(r, e.id, e.offsetNS()) })
	b.flush(r)
	return r, nil
}

type cacheKey struct {
	path  string
	epoch int64
}

// cacheStore keeps closed epochs' caches for a number of epochs per path and
// within a byte budget, evicting the oldest first. Safe for concurrent use.
type cacheStore struct {
	retention int   // epochs kept per path
	maxBytes  int64 // all caches together

	mu          sync.Mutex
	caches      map[cacheKey]*epochCache
	order       []cacheKey // oldest first
	bytes       int64
	evicted     uint64
	outstanding map[cacheKey]bool // reported, not yet released by the collector
	disk        *disk             // nil: memory only
	freed       chan struct{}     // closed, and replaced, when a cache goes

	// Outstanding caches evicted (live capture cannot wait), the last
	// lostKeep of them remembered, and repairs that then asked for one.
	lostEvicted uint64
	lost        map[cacheKey]bool
	lostOrder   []cacheKey
	lostAsked   uint64
	waitedNS    int64 // time a file reader waited for room

	// log (nil: not logged) warns of outstanding caches evicted, at most
	// once every lostWarnEvery: the count since the last warning, and
	// the latest of them.
	log           *slog.Logger
	now           func() time.Time
	lostSinceWarn uint64
	lastLost      cacheKey
	lastWarnAt    time.Time
}

// lostKeep bounds the evicted outstanding caches remembered.
const lostKeep = 4096

// lostWarnEvery is the least time between two warnings of outstanding
// caches evicted: live capture at a short retention evicts one per path
// and epoch.
const lostWarnEvery = 10 * time.Second

func newCacheStore(retention int, maxBytes int64) *cacheStore {
	return &cacheStore{retention: retention, maxBytes: maxBytes, caches: map[cacheKey]*epochCache{},
		outstanding: map[cacheKey]bool{}, freed: make(chan struct{}), lost: map[cacheKey]bool{}, now: time.Now}
}

// waitRoom waits until the caches of open more epochs per path fit in the
// budget without evicting one the collector has not released: a file
// reader calls it before each new epoch, so that it never runs further
// ahead of the collector than the caches reach. It returns at once when
// no epoch is outstanding, and ctx's error when ctx ends first.
func (s *cacheStore) waitRoom(ctx context.Context, open int) error {
	var start time.Time
	for {
		s.mu.Lock()
		room, freed := s.roomFor(open), s.freed
		s.mu.Unlock()
		if room {
			if !start.IsZero() {
				s.mu.Lock()
				s.waitedNS += int64(time.Since(start))
				s.mu.Unlock()
			}
			return nil
		}
		if start.IsZero() {
			start = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-freed:
		case <-time.After(time.Second):
		}
	}
}

// roomFor says whether open more epochs of every path fit: no path keeps
// more than retention−open caches, and the caches held, grown by open
// more of their mean size per path, stay within the byte budget. s.mu is
// held.
func (s *cacheStore) roomFor(open int) bool {
	if len(s.outstanding) == 0 || len(s.order) == 0 {
		return true
	}
	per := map[string]int{}
	most := 0
	for _, k := range s.order {
		per[k.path]++
		most = max(most, per[k.path])
	}
	grown := s.bytes + s.bytes*int64(open*len(per))/int64(len(s.order))
	return most+open <= s.retention && grown <= s.maxBytes
}

// put keeps a closed epoch's cache until the collector releases the epoch
// (or it is evicted by age or size).
func (s *cacheStore) put(path string, epoch int64, c *epochCache) {
	s.mu.Lock()
	k := cacheKey{path, epoch}
	s.outstanding[k] = true
	if old := s.caches[k]; old != nil {
		s.bytes -= int64(old.len()) * entryBytes
	} else {
		s.order = append(s.order, k)
	}
	s.caches[k] = c
	s.bytes += int64(c.len()) * entryBytes
	if s.disk != nil {
		s.disk.putCache(k, c)
	}
	s.evict(path)
	w := s.lostWarningDue()
	s.mu.Unlock()
	s.warnLost(w)
}

// load takes up the caches a previous run of the probe left on disk, and
// keeps every later one there too. Those of epochs whose reports wait in
// the spool are outstanding: the collector has not released them.
func (s *cacheStore) load(d *disk, maxEntries int, spooled func(cacheKey) bool) int {
	jobs := d.caches(maxEntries)
	s.mu.Lock()
	s.disk = d
	for _, j := range jobs {
		if s.caches[j.k] == nil {
			s.order = append(s.order, j.k)
		}
		s.caches[j.k] = j.c
		s.bytes += int64(j.c.len()) * entryBytes
		if spooled(j.k) {
			s.outstanding[j.k] = true
		}
		s.evict(j.k.path)
	}
	n, w := len(s.caches), s.lostWarningDue()
	s.mu.Unlock()
	s.warnLost(w)
	return n
}

// evict drops the oldest caches of path past the retention, then the
// oldest of all past the byte budget. s.mu is held.
func (s *cacheStore) evict(path string) {
	// Per path, only the newest retention epochs.
	n := 0
	for i := len(s.order) - 1; i >= 0; i-- {
		if s.order[i].path == path {
			n++
			if n > s.retention {
				s.drop(i)
			}
		}
	}
	for s.bytes > s.maxBytes && len(s.order) > 1 {
		s.drop(0)
	}
}

// drop removes the cache at position i of order. s.mu is held.
func (s *cacheStore) drop(i int) {
	k := s.order[i]
	if c := s.caches[k]; c != nil {
		s.bytes -= int64(c.len()) * entryBytes
		delete(s.caches, k)
		s.evicted++
		if s.disk != nil {
			s.disk.removeCache(k)
		}
		if s.outstanding[k] {
			s.noteLost(k)
		}
		c.recycle()
	}
	s.order = slices.Delete(s.order, i, i+1)
	s.signal()
}

// signal wakes the file readers waiting for room. s.mu is held.
func (s *cacheStore) signal() {
	close(s.freed)
	s.freed = make(chan struct{})
}

// noteLost counts and remembers a cache evicted before the collector
// released its epoch. s.mu is held.
func (s *cacheStore) noteLost(k cacheKey) {
	s.lostEvicted++
	if !s.lost[k] {
		s.lost[k] = true
		s.lostOrder = append(s.lostOrder, k)
	}
	if len(s.lostOrder) > lostKeep {
		delete(s.lost, s.lostOrder[0])
		s.lostOrder = s.lostOrder[1:]
	}
	s.lostSinceWarn++
	s.lastLost = k
}

// lostWarning is a warning due of outstanding caches evicted.
type lostWarning struct {
	n, total uint64 // since the last warning, and in all
	last     cacheKey
}

// lostWarningDue returns the warning due now, if any, and starts the
// count of the next one: there is one when caches were evicted since the
// last, and lostWarnEvery has passed. put, load and release ask, so a
// count the rate limit held back goes out with the first of them after
// lostWarnEvery, whether it evicts or not. s.mu is held.
func (s *cacheStore) lostWarningDue() *lostWarning {
	if s.lostSinceWarn == 0 || s.log == nil {
		return nil
	}
	now := s.now()
	if !s.lastWarnAt.IsZero() && now.Sub(s.lastWarnAt) < lostWarnEvery {
		return nil
	}
	w := &lostWarning{n: s.lostSinceWarn, total: s.lostEvicted, last: s.lastLost}
	s.lostSinceWarn, s.lastWarnAt = 0, now
	return w
}

// warnLost logs a warning lostWarningDue returned, s.mu not held.
func (s *cacheStore) warnLost(w *lostWarning) {
	if w == nil {
		return
	}
	s.log.Warn("repair caches evicted before the collector released their epoch (live capture cannot wait): raise cache.retention_epochs or cache.max_bytes",
		"evicted", w.n, "evicted_total", w.total, "last_path", w.last.path, "last_epoch", w.last.epoch,
		"retention_epochs", s.retention, "max_bytes", s.maxBytes)
}

// missing is the error of a repair that asked for a cache not held,
// counted when the cache was evicted before the collector released it.
func (s *cacheStore) missing(path string, epoch int64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost[cacheKey{path, epoch}] {
		s.lostAsked++
		return fmt.Sprintf("the cache of path %q epoch %d was evicted before the collector released the epoch (cache budget: %d epochs per path, %d bytes): raise cache.retention_epochs or cache.max_bytes",
			path, epoch, s.retention, s.maxBytes)
	}
	return fmt.Sprintf("no cache for path %q epoch %d (released, evicted or never seen)", path, epoch)
}

// lostCounts are the outstanding caches evicted, the repairs that asked
// for one, and the seconds file readers waited for room.
func (s *cacheStore) lostCounts() (evicted, asked uint64, waited float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lostEvicted, s.lostAsked, time.Duration(s.waitedNS).Seconds()
}

// release drops an epoch the collector is done with.
func (s *cacheStore) release(path string, epoch int64) {
	s.mu.Lock()
	k := cacheKey{path, epoch}
	delete(s.outstanding, k)
	if i := slices.Index(s.order, k); i >= 0 {
		s.drop(i)
	} else {
		s.signal()
	}
	w := s.lostWarningDue()
	s.mu.Unlock()
	s.warnLost(w)
}

// unreleased is the number of reported epochs the collector has not released.
func (s *cacheStore) unreleased() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.outstanding)
}

// maxHelloUnreleased bounds the epochs a Hello lists as unreleased.
const maxHelloUnreleased = 4096

// unreleasedRefs lists up to max reported epochs the collector has not
// released, oldest first.
func (s *cacheStore) unreleasedRefs(max int) []*owlv1.EpochRef {
	s.mu.Lock()
	keys := make([]cacheKey, 0, len(s.outstanding))
	for k := range s.outstanding {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	slices.SortFunc(keys, func(a, b cacheKey) int {
		return cmp.Or(cmp.Compare(a.epoch, b.epoch), cmp.Compare(a.path, b.path))
	})
	refs := make([]*owlv1.EpochRef, 0, min(max, len(keys)))
	for _, k := range keys[:min(max, len(keys))] {
		refs = append(refs, &owlv1.EpochRef{Path: k.path, Epoch: k.epoch})
	}
	return refs
}

func (s *cacheStore) get(path string, epoch int64) *epochCache {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.caches[cacheKey{path, epoch}]
}

// size returns the bytes held.
func (s *cacheStore) size() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// fetch answers a FetchRequest.
func (s *cacheStore) fetch(req *owlv1.FetchRequest) *owlv1.FetchReply {
	rep := &owlv1.FetchReply{RequestId: req.GetRequestId()}
	c := s.get(req.GetPath(), req.GetEpoch())
	if c == nil {
		rep.Error = s.missing(req.GetPath(), req.GetEpoch())
		return rep
	}
	var entries []entry
	if req.GetRepeated() {
		entries = c.repeated()
	} else {
		entries = c.lookup(req.GetPacketIds())
	}
	for _, e := range entries {
		rep.PacketIds = append(rep.PacketIds, e.id)
		rep.OffsetsNs = append(rep.OffsetsNs, e.offsetNS())
		rep.FlowHashes = append(rep.FlowHashes, e.flow)
		rep.Weights = append(rep.Weights, e.weight())
	}
	return rep
}

// rebuild answers a RebuildRequest.
func (s *cacheStore) rebuild(req *owlv1.RebuildRequest) *owlv1.RebuildReply {
	rep := &owlv1.RebuildReply{RequestId: req.GetRequestId()}
	c := s.get(req.GetPath(), req.GetEpoch())
	switch {
	case c == nil:
		rep.Error = s.missing(req.GetPath(), req.GetEpoch())
		return rep
	case !c.complete:
		rep.Error = fmt.Sprintf("cache of path %q epoch %d overflowed: cannot rebuild", req.GetPath(), req.GetEpoch())
		return rep
	}
	r, err := c.rebuild(int(req.GetBuckets()))
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	rep.Rda, _ = r.MarshalBinary()
	return rep
}
