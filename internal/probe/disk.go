package probe

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/synopsis/rda"
)

// disk keeps what a probe holds for the collector in its data directory,
// so that a restarted probe sends again what was not acknowledged and
// still answers repairs of the epochs not released:
//
//	probe-id          the probe the directory belongs to
//	paths.pb          the last path configuration from a collector, with
//	                  the deployment's parameters
//	lock              held (flock) while a probe runs on the directory
//	spool/<seq>.msg   one unacknowledged ProbeMessage each
//	cache/<path>@<epoch>.cache   one epoch's (ID, timestamp) cache each
//
// The files but lock are written whole under a temporary name and
// renamed into place (writeFile). Spool files are written before the
// message can be sent; cache files by a goroutine of their own, in order
// with their removals, so that capture never waits for the disk. Only
// probe-id is synced, once, when the directory is claimed. Spool and
// cache files are not: there are one per path every epoch, and a sync
// each would cost a disk flush per report; nor is paths.pb, rewritten
// with every path configuration. They outlive the probe's process, not
// a power cut of its machine (docs/faults.md).
type disk struct {
	dir  string
	lock *os.File
	log  *slog.Logger

	mu     sync.Mutex
	cond   *sync.Cond    // signalled on every change of jobs and busy
	jobs   []cacheJob    // cache writes and removals, in order
	busy   bool          // the writer runs a job
	closed bool          // no more jobs are taken
	idle   chan struct{} // closed when the writer has stopped

	dropped [dataDrops]atomic.Uint64 // by dataDrop
}

// dataDrop is a kind of loss in the data directory, each logged and
// counted in owl_probe_data_dir_dropped_total{what}.
type dataDrop int

const (
	dropSpoolFile  dataDrop = iota // an unreadable spool file, at start
	dropCacheFile                  // an unreadable cache file, at start
	dropSpoolWrite                 // a spooled message not written
	dataDrops
)

// dataDropNames are the metric's labels, by dataDrop.
var dataDropNames = [dataDrops]string{"spool_file", "cache_file", "spool_write"}

// droppedCount is the number of drops of kind k.
func (d *disk) droppedCount(k dataDrop) uint64 { return d.dropped[k].Load() }

type cacheJob struct {
	k cacheKey
	c *epochCache // nil: remove the file
}

// openDisk takes the data directory for probe id: another probe (or a
// second copy of this one) running on it is refused.
func openDisk(dir, id string, log *slog.Logger) (*disk, error) {
	for _, sub := range []string{"spool", "cache"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, fmt.Errorf("data directory: %w", err)
		}
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("data directory %s is in use by another probe (%v): give each probe its own", dir, err)
	}
	d := &disk{dir: dir, lock: lock, log: log, idle: make(chan struct{})}
	if err := d.claim(id); err != nil {
		lock.Close()
		return nil, err
	}
	d.cond = sync.NewCond(&d.mu)
	go d.writeCaches()
	return d, nil
}

// claim checks that the directory is probe id's, writing the id into a
// new one.
func (d *disk) claim(id string) error {
	name := filepath.Join(d.dir, "probe-id")
	b, err := os.ReadFile(name)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return writeFile(name, []byte(id+"\n"), true)
	case err != nil:
		return fmt.Errorf("data directory: %w", err)
	}
	if got := strings.TrimSpace(string(b)); got != id {
		return fmt.Errorf("data directory %s belongs to probe %q, not %q: give each probe its own", d.dir, got, id)
	}
	return nil
}

// close stops the cache writer once its queue is done and lets go of the
// directory.
func (d *disk) close() {
	d.mu.Lock()
	d.closed = true
	d.cond.Broadcast()
	d.mu.Unlock()
	<-d.idle
	d.lock.Close()
}

// writeFile writes a file under a temporary name and renames it into
// place, so that a process that dies leaves the old file or the new one,
// never a part. With sync the data reach the disk first (a power loss
// then keeps them too); only probe-id is written so (see disk).
func writeFile(name string, b []byte, sync bool) error {
	tmp := name + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// putPaths keeps the path configuration, and the collector's parameters
// it carries, so that a probe restarted while the collector is away
// captures at once (with those parameters, unless given its own).
func (d *disk) putPaths(pc *owlv1.PathConfig) {
	b, err := proto.Marshal(pc)
	if err == nil {
		err = writeFile(filepath.Join(d.dir, "paths.pb"), b, false)
	}
	if err != nil {
		d.log.Error("keeping the path configuration", "err", err)
	}
}

// paths is the kept path configuration, or nil.
func (d *disk) paths() *owlv1.PathConfig {
	b, err := os.ReadFile(filepath.Join(d.dir, "paths.pb"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	pc := &owlv1.PathConfig{}
	if err == nil {
		err = proto.Unmarshal(b, pc)
	}
	if err != nil {
		d.log.Error("ignoring the kept path configuration", "err", err)
		return nil
	}
	return pc
}

func (d *disk) msgName(seq uint64) string {
	return filepath.Join(d.dir, "spool", fmt.Sprintf("%020d.msg", seq))
}

// putMessage keeps a spooled message; one not written is counted (the
// caller logs it).
func (d *disk) putMessage(m *owlv1.ProbeMessage) error {
	b, err := proto.Marshal(m)
	if err == nil {
		err = writeFile(d.msgName(seqOf(m)), b, false)
	}
	if err != nil {
		d.dropped[dropSpoolWrite].Add(1)
	}
	return err
}

// removeMessage forgets an acknowledged or dropped message.
func (d *disk) removeMessage(seq uint64) {
	if err := os.Remove(d.msgName(seq)); err != nil && !errors.Is(err, os.ErrNotExist) {
		d.log.Error("removing a spooled message", "seq", seq, "err", err)
	}
}

// messages reads the spooled messages, oldest first. An unreadable one is
// logged, counted and removed: it cannot be sent.
func (d *disk) messages() ([]*owlv1.ProbeMessage, error) {
	dir := filepath.Join(d.dir, "spool")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the spool: %w", err)
	}
	var out []*owlv1.ProbeMessage
	for _, e := range ents {
		name := filepath.Join(dir, e.Name())
		seq, err := strconv.ParseUint(strings.TrimSuffix(e.Name(), ".msg"), 10, 64)
		if err != nil || !strings.HasSuffix(e.Name(), ".msg") {
			os.Remove(name) // a temporary file of a write cut short
			continue
		}
		m, err := readMessage(name)
		if err == nil && seqOf(m) != seq {
			err = fmt.Errorf("holds seq %d", seqOf(m))
		}
		if err != nil {
			d.log.Error("dropping an unreadable spooled message", "file", name, "err", err)
			d.dropped[dropSpoolFile].Add(1)
			os.Remove(name)
			continue
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *owlv1.ProbeMessage) int { return cmp.Compare(seqOf(a), seqOf(b)) })
	return out, nil
}

func readMessage(name string) (*owlv1.ProbeMessage, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	m := &owlv1.ProbeMessage{}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, err
	}
	if m.GetReport() == nil && m.GetColate() == nil && m.GetRtt() == nil && m.GetReorder() == nil {
		return nil, errors.New("not a spooled message: neither an epoch, RTT or reordering report nor a COLATE vector")
	}
	return m, nil
}

func (d *disk) cacheName(k cacheKey) string {
	return filepath.Join(d.dir, "cache", fmt.Sprintf("%s@%d.cache", k.path, k.epoch))
}

// putCache queues an epoch's cache to be written.
func (d *disk) putCache(k cacheKey, c *epochCache) { d.queue(cacheJob{k, c}) }

// removeCache queues the removal of an epoch's cache file; a write of it
// still queued is dropped.
func (d *disk) removeCache(k cacheKey) {
	d.mu.Lock()
	d.jobs = slices.DeleteFunc(d.jobs, func(j cacheJob) bool { return j.k == k && j.c != nil })
	d.mu.Unlock()
	d.queue(cacheJob{k: k})
}

func (d *disk) queue(j cacheJob) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	d.jobs = append(d.jobs, j)
	d.cond.Broadcast()
}

// writeCaches runs the queued cache jobs until close.
func (d *disk) writeCaches() {
	defer close(d.idle)
	for {
		d.mu.Lock()
		for len(d.jobs) == 0 && !d.closed {
			d.cond.Wait()
		}
		if len(d.jobs) == 0 {
			d.mu.Unlock()
			return
		}
		j := d.jobs[0]
		d.jobs, d.busy = d.jobs[1:], true
		d.mu.Unlock()
		d.run(j)
		d.mu.Lock()
		d.busy = false
		d.cond.Broadcast()
		d.mu.Unlock()
	}
}

// run writes or removes one cache file.
func (d *disk) run(j cacheJob) {
	name := d.cacheName(j.k)
	if j.c == nil {
		if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			d.log.Error("removing a cache file", "file", name, "err", err)
		}
		return
	}
	if err := writeFile(name, encodeCache(j.k, j.c), false); err != nil {
		d.log.Error("writing a cache file: a restarted probe will not answer repairs of this epoch", "file", name, "err", err)
	}
}

// flushed waits until every queued cache job is done.
func (d *disk) flushed() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for (len(d.jobs) > 0 || d.busy) && !d.closed {
		d.cond.Wait()
	}
}

// cacheMagic opens a cache file; the version is its last byte.
var cacheMagic = []byte("owl-cache\x01")

// encodeCache: magic | path length (uvarint) | path | epoch (varint) |
// banks, buckets (uvarint) | seed (8) | check, complete (1 each) |
// entries (uvarint) | entries × (id, flow, offset·weight) 8 bytes each.
func encodeCache(k cacheKey, c *epochCache) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := bytes.Clone(cacheMagic)
	b = binary.AppendUvarint(b, uint64(len(k.path)))
	b = append(b, k.path...)
	b = binary.AppendVarint(b, k.epoch)
	b = binary.AppendUvarint(b, uint64(c.rda.Banks))
	b = binary.AppendUvarint(b, uint64(c.rda.Buckets))
	b = binary.LittleEndian.AppendUint64(b, c.rda.Seed)
	b = append(b, boolByte(c.rda.Check), boolByte(c.complete))
	b = binary.AppendUvarint(b, uint64(c.len()))
	b = slices.Grow(b, c.len()*entryBytes)
	c.each(func(e entry) {
		b = binary.LittleEndian.AppendUint64(b, e.id)
		b = binary.LittleEndian.AppendUint64(b, e.flow)
		b = binary.LittleEndian.AppendUint64(b, e.offW)
	})
	return b
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// decodeCache reads a cache file's bytes; maxEntries bounds what a
// damaged or hostile file can make it allocate.
func decodeCache(b []byte, maxEntries int) (cacheKey, *epochCache, error) {
	var k cacheKey
	if !bytes.HasPrefix(b, cacheMagic) {
		return k, nil, errors.New("not an owl cache file")
	}
	r := &reader{b: b[len(cacheMagic):]}
	k.path = string(r.bytes(int(min(r.uvarint(), 1<<10))))
	k.epoch = r.varint()
	cfg := rda.Config{Banks: int(r.uvarint()), Buckets: int(r.uvarint()), Seed: r.uint64()}
	flags := r.bytes(2)
	n := r.uvarint()
	if r.err != nil {
		return k, nil, r.err
	}
	cfg.Check = flags[0] == 1
	if n > uint64(maxEntries) || n*entryBytes != uint64(len(r.b)) {
		return k, nil, fmt.Errorf("%d entries in %d bytes (at most %d entries)", n, len(r.b), maxEntries)
	}
	if err := cfg.Validate(); err != nil {
		return k, nil, err
	}
	entries := make([]entry, n)
	for i := range entries {
		e := r.b[i*entryBytes:]
		entries[i] = entry{id: binary.LittleEndian.Uint64(e), flow: binary.LittleEndian.Uint64(e[8:]), offW: binary.LittleEndian.Uint64(e[16:])}
	}
	c := &epochCache{rda: cfg, complete: flags[1] == 1, n: len(entries)}
	if len(entries) > 0 {
		c.chunks = [][]entry{entries}
	}
	return k, c, nil
}

// reader reads the fields of a cache file, keeping the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errors.New("cache file cut short")
	}
	r.b = nil
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) uint64() uint64 {
	if len(r.b) < 8 {
		r.fail()
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) bytes(n int) []byte {
	if n < 0 || len(r.b) < n {
		r.fail()
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// caches reads the cache files, oldest epoch first. An unreadable one is
// logged, counted and removed.
func (d *disk) caches(maxEntries int) []cacheJob {
	dir := filepath.Join(d.dir, "cache")
	ents, err := os.ReadDir(dir)
	if err != nil {
		d.log.Error("reading the caches", "err", err)
		return nil
	}
	var out []cacheJob
	for _, e := range ents {
		name := filepath.Join(dir, e.Name())
		if !strings.HasSuffix(e.Name(), ".cache") {
			os.Remove(name)
			continue
		}
		b, err := os.ReadFile(name)
		var k cacheKey
		var c *epochCache
		if err == nil {
			k, c, err = decodeCache(b, maxEntries)
		}
		if err == nil && d.cacheName(k) != name {
			err = fmt.Errorf("holds path %q epoch %d", k.path, k.epoch)
		}
		if err != nil {
			d.log.Error("dropping an unreadable cache file", "file", name, "err", err)
			d.dropped[dropCacheFile].Add(1)
			os.Remove(name)
			continue
		}
		out = append(out, cacheJob{k, c})
	}
	slices.SortFunc(out, func(a, b cacheJob) int { return cmp.Compare(a.k.epoch, b.k.epoch) })
	return out
}
