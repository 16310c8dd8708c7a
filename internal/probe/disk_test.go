package probe

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/synopsis/rda"
)

var quiet = slog.New(slog.DiscardHandler)

// TestSpoolSurvivesRestart: what was spooled and not acknowledged (epoch
// reports, a COLATE vector, an RTT report) is there again, in order, for a
// probe started on the same directory; what was acknowledged is not; the
// numbering goes on past it.
func TestSpoolSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	d, err := openDisk(dir, "p1", quiet)
	if err != nil {
		t.Fatal(err)
	}
	s := newSpool(10, 1<<30)
	if _, err := s.load(d); err != nil {
		t.Fatal(err)
	}
	for e := int64(1); e <= 4; e++ {
		s.add(&owlv1.EpochReport{Path: "p", Epoch: e, Lda: []byte{byte(e)}})
	}
	s.addVector(&owlv1.ColateVector{Epoch: 4, Vector: []byte{9}})
	s.addRTT(&owlv1.RTTReport{Epoch: 4, Counters: &owlv1.RTTCounters{Requests: 3}})
	s.ack(2)
	want := s.after(0)
	d.close() // the process ends (its lock goes with it)

	d2, err := openDisk(dir, "p1", quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.close()
	s2 := newSpool(10, 1<<30)
	n, err := s2.load(d2)
	if err != nil || n != 5 {
		t.Fatalf("loaded %d messages (%v), want 5", n, err)
	}
	got := s2.after(0)
	if len(got) != len(want) {
		t.Fatalf("after restart %d messages, want %d", len(got), len(want))
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("message %d: %v, want %v", i, got[i], want[i])
		}
	}
	s2.add(&owlv1.EpochReport{Path: "p", Epoch: 5})
	if last := s2.after(0)[5]; seqOf(last) != 7 {
		t.Errorf("numbering after restart: seq %d, want 7", seqOf(last))
	}
	// Acknowledged and dropped messages leave the disk too.
	for _, m := range s2.after(0) {
		s2.ack(seqOf(m))
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "spool")); len(ents) != 0 {
		t.Errorf("%d spool files left after every ack", len(ents))
	}
}

// TestSpoolBoundInBytes: past spool_max_bytes the oldest epochs go (never
// the one being added), on disk too.
func TestSpoolBoundInBytes(t *testing.T) {
	dir := t.TempDir()
	d, err := openDisk(dir, "p1", quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	s := newSpool(100, 3500)
	s.load(d)
	for e := int64(1); e <= 5; e++ {
		s.add(&owlv1.EpochReport{Path: "p", Epoch: e, Lda: make([]byte, 1000)})
	}
	if s.len() != 3 || s.droppedTotal() != 2 || epochOf(s.after(0)[0]) != 3 || s.size() > 3500 {
		t.Fatalf("len %d dropped %d first epoch %d size %d", s.len(), s.droppedTotal(), epochOf(s.after(0)[0]), s.size())
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "spool")); len(ents) != 3 {
		t.Errorf("%d spool files, want 3", len(ents))
	}
	// A message larger than the bound is kept alone.
	s.add(&owlv1.EpochReport{Path: "p", Epoch: 6, Lda: make([]byte, 5000)})
	if s.len() != 1 || s.droppedTotal() != 5 {
		t.Errorf("oversized message: len %d dropped %d", s.len(), s.droppedTotal())
	}
}

// TestCachesSurviveRestart: a restarted probe answers fetches and
// rebuilds of the epochs it cached, exactly as before; a release removes
// the file; only epochs whose reports are still spooled are outstanding.
func TestCachesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	d, err := openDisk(dir, "p1", quiet)
	if err != nil {
		t.Fatal(err)
	}
	cs := newCacheStore(8, 1<<30)
	cs.load(d, 1<<20, func(cacheKey) bool { return true })
	cfg := rda.Config{Banks: 2, Buckets: 64, Seed: 7, Check: true}
	for e := int64(1); e <= 3; e++ {
		c := &epochCache{rda: cfg, complete: e != 3}
		for i := range uint64(200) {
			c.add(newEntry(i*7919+uint64(e), i%5, int64(i)*1000+e, i%3+1), 1<<20)
		}
		c.add(newEntry(7919+uint64(e), 1, 5, 1), 1<<20) // a repeated ID
		cs.put("a-b", e, c)
	}
	ids := []uint64{7919 + 1, 3*7919 + 1, 12345}
	wantFetch := cs.fetch(&owlv1.FetchRequest{Path: "a-b", Epoch: 1, PacketIds: ids})
	wantRep := cs.fetch(&owlv1.FetchRequest{Path: "a-b", Epoch: 1, Repeated: true})
	wantRebuild := cs.rebuild(&owlv1.RebuildRequest{Path: "a-b", Epoch: 2, Buckets: 256})
	cs.release("a-b", 2)
	d.flushed()
	d.close()

	d2, err := openDisk(dir, "p1", quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.close()
	cs2 := newCacheStore(8, 1<<30)
	n := cs2.load(d2, 1<<20, func(k cacheKey) bool { return k.epoch == 3 })
	if n != 2 || cs2.unreleased() != 1 {
		t.Fatalf("loaded %d caches, %d outstanding; want 2 and 1", n, cs2.unreleased())
	}
	if got := cs2.fetch(&owlv1.FetchRequest{Path: "a-b", Epoch: 1, PacketIds: ids}); !proto.Equal(got, wantFetch) || len(got.GetPacketIds()) != 3 {
		t.Errorf("fetch after restart: %v, want %v", got, wantFetch)
	}
	if got := cs2.fetch(&owlv1.FetchRequest{Path: "a-b", Epoch: 1, Repeated: true}); !proto.Equal(got, wantRep) {
		t.Errorf("repeated after restart: %v, want %v", got, wantRep)
	}
	if got := cs2.rebuild(&owlv1.RebuildRequest{Path: "a-b", Epoch: 2}); got.GetError() == "" {
		t.Errorf("released epoch 2 answered after restart")
	}
	if wantRebuild.GetError() != "" || len(wantRebuild.GetRda()) == 0 {
		t.Fatalf("rebuild before restart: %v", wantRebuild.GetError())
	}
	if got := cs2.rebuild(&owlv1.RebuildRequest{Path: "a-b", Epoch: 3, Buckets: 256}); !strings.Contains(got.GetError(), "overflowed") {
		t.Errorf("an overflowed cache lost its flag across the restart: %q", got.GetError())
	}
}

// TestCacheRebuildAfterRestart: the RDA rebuilt from a reloaded cache is
// the one rebuilt before, byte for byte.
func TestCacheRebuildAfterRestart(t *testing.T) {
	cfg := rda.Config{Banks: 2, Buckets: 32, Seed: 99, Check: true}
	c := &epochCache{rda: cfg, complete: true}
	for i := range uint64(500) {
		c.add(newEntry(i*104729+3, i, int64(i)*777, 1), 1<<20)
	}
	k := cacheKey{"x.y:z-1", -42}
	k2, c2, err := decodeCache(encodeCache(k, c), 1<<20)
	if err != nil || k2 != k {
		t.Fatalf("decode: %v %v", k2, err)
	}
	a, _ := c.rebuild(128)
	b, _ := c2.rebuild(128)
	ab, _ := a.MarshalBinary()
	bb, _ := b.MarshalBinary()
	if !bytes.Equal(ab, bb) {
		t.Error("rebuilt RDA differs after a round trip through disk")
	}
}

// TestDataDirOwned: a directory is one probe's: another id is refused,
// and so is a second probe while the first runs.
func TestDataDirOwned(t *testing.T) {
	dir := t.TempDir()
	d, err := openDisk(dir, "p1", quiet)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openDisk(dir, "p1", quiet); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second probe on a directory in use: %v", err)
	}
	d.close()
	if _, err := openDisk(dir, "p2", quiet); err == nil || !strings.Contains(err.Error(), `belongs to probe "p1"`) {
		t.Errorf("another probe's directory: %v", err)
	}
}

// TestDamagedDataDir: unreadable spool and cache files are dropped with a
// log line, never a crash; what is readable is kept.
func TestDamagedDataDir(t *testing.T) {
	dir := t.TempDir()
	d, err := openDisk(dir, "p1", quiet)
	if err != nil {
		t.Fatal(err)
	}
	s := newSpool(10, 1<<30)
	s.load(d)
	cs := newCacheStore(8, 1<<30)
	cs.load(d, 1<<20, func(cacheKey) bool { return false })
	for e := int64(1); e <= 3; e++ {
		s.add(&owlv1.EpochReport{Path: "p", Epoch: e})
		c := &epochCache{rda: rda.DefaultConfig(), complete: true}
		c.add(newEntry(uint64(e), 1, 1, 1), 10)
		cs.put("p", e, c)
	}
	d.flushed()
	d.close()
	// Damage: garbage in one spool file, a cache file cut short, a
	// cache file renamed to another epoch, a leftover temporary file.
	os.WriteFile(d.msgName(2), []byte("\xff\xff garbage"), 0o644)
	cacheFile := d.cacheName(cacheKey{"p", 1})
	b, _ := os.ReadFile(cacheFile)
	os.WriteFile(cacheFile, b[:len(b)-5], 0o644)
	os.Rename(d.cacheName(cacheKey{"p", 2}), d.cacheName(cacheKey{"p", 9}))
	os.WriteFile(filepath.Join(dir, "spool", "00000000000000000007.msg.tmp"), []byte("x"), 0o644)

	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	d2, err := openDisk(dir, "p1", log)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.close()
	s2 := newSpool(10, 1<<30)
	if n, err := s2.load(d2); err != nil || n != 2 {
		t.Errorf("spool after damage: %d messages (%v), want 2", n, err)
	}
	cs2 := newCacheStore(8, 1<<30)
	if n := cs2.load(d2, 1<<20, func(cacheKey) bool { return false }); n != 1 || cs2.get("p", 3) == nil {
		t.Errorf("caches after damage: %d, want epoch 3 alone", n)
	}
	if c := strings.Count(logged.String(), "unreadable"); c != 3 {
		t.Errorf("%d damaged files logged, want 3:\n%s", c, logged.String())
	}
	if s, c := d2.droppedCount(dropSpoolFile), d2.droppedCount(dropCacheFile); s != 1 || c != 2 {
		t.Errorf("damaged files counted: %d spool, %d cache; want 1 and 2", s, c)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "spool"))
	if len(ents) != 2 {
		t.Errorf("spool holds %d files after the damaged ones went, want 2", len(ents))
	}
}

// TestPartialEpoch: a live capture that starts or stops inside an epoch
// marks it partial; the epochs between are whole.
func TestPartialEpoch(t *testing.T) {
	sec, ms := int64(time.Second), int64(time.Millisecond)
	r := &reporter{grid: epoch.Config{Length: time.Second}}
	r.startedNS.Store(10*sec + 250*ms)
	if p := r.partial(10); p != "capture started 250ms into the epoch" {
		t.Errorf("epoch of the start: %q", p)
	}
	if p := r.partial(11); p != "" {
		t.Errorf("the epoch after: %q", p)
	}
	r.startedNS.Store(12 * sec)
	if p := r.partial(12); p != "" {
		t.Errorf("a start on the boundary: %q", p)
	}
	r.stoppedNS.Store(13*sec + 400*ms)
	if p := r.partial(13); p != "capture stopped 400ms into the epoch" {
		t.Errorf("epoch of the stop: %q", p)
	}
	if p := r.partial(12); p != "" {
		t.Errorf("the epoch before the stop: %q", p)
	}
	r.startedNS.Store(13*sec + 100*ms)
	if p := r.partial(13); p != "capture started 100ms into the epoch and capture stopped 400ms into the epoch" {
		t.Errorf("start and stop in one epoch: %q", p)
	}
	r.startedNS.Store(12 * sec)
	r.stoppedNS.Store(14 * sec)
	if p := r.partial(13); p != "" {
		t.Errorf("a stop on the boundary: %q", p)
	}
}

// TestStopReportsPartialEpoch: a live capture that stops reports the
// epochs still open up to the stop, merged over its workers, the one the
// stop falls in marked partial; an epoch that had not begun at the stop
// is not reported.
func TestStopReportsPartialEpoch(t *testing.T) {
	var reports []*owlv1.EpochReport
	p := &Probe{cfg: DefaultConfig(), workers: 2, rep: &reporter{caches: newCacheStore(8, 1<<24), topFlows: 5,
		clock: func(int64, int64) *owlv1.ClockStatus { return &owlv1.ClockStatus{} },
		emit:  func(r *owlv1.EpochReport) { reports = append(reports, r) }}}
	if err := p.build(params.Default()); err != nil {
		t.Fatal(err)
	}
	set, _ := newPathSet(&owlv1.PathConfig{Paths: []*owlv1.PathAssignment{
		{Path: &owlv1.Path{Name: "all", Upstream: "a", Downstream: "b"}, Role: owlv1.Role_ROLE_UPSTREAM}}})
	for _, pl := range p.pipes {
		pl.setPaths(set)
		_ = pl.setLink(layers.LinkTypeEthernet)
	}
	grid := p.rep.grid
	e0, _ := grid.Of(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	at := func(e, ms int64) int64 { return grid.StartNS(e) + ms*int64(time.Millisecond) }
	p.pipes[0].frame(frame(t, "10.0.0.1", "10.0.0.2", 1000, 53), at(e0, 100))
	p.pipes[1].frame(frame(t, "10.0.0.1", "10.0.0.3", 1001, 53), at(e0+1, 50))
	p.pipes[0].frame(frame(t, "10.0.0.1", "10.0.0.4", 1002, 53), at(e0+1, 300)) // worker 0 closes e0
	p.pipes[1].frame(frame(t, "10.0.0.1", "10.0.0.5", 1003, 53), at(e0+2, 10))  // ahead of the stop
	if len(reports) != 0 {
		t.Fatalf("%d reports before the stop: e0 waits for worker 1", len(reports))
	}

	last, discarded := p.closeAtStop(at(e0+1, 400))
	if last != e0+1 || discarded != 1 {
		t.Errorf("closeAtStop: last epoch %d, %d discarded; want %d and 1", last, discarded, e0+1)
	}
	if len(reports) != 2 {
		t.Fatalf("%d reports after the stop, want 2: %v", len(reports), reports)
	}
	for i, want := range []struct {
		packets uint64
		partial string
	}{{1, ""}, {2, "capture stopped 400ms into the epoch"}} {
		r := reports[i]
		if r.Epoch != e0+int64(i) || r.Counters.Packets != want.packets || r.Partial != want.partial {
			t.Errorf("report %d: epoch %d, %d packets, partial %q; want %d, %d, %q",
				i, r.Epoch-e0, r.Counters.Packets, r.Partial, i, want.packets, want.partial)
		}
	}
}

// FuzzDecodeCache: a cache file of any bytes is refused or read within
// its bound, never a panic; what is read encodes to the same bytes.
func FuzzDecodeCache(f *testing.F) {
	c := &epochCache{rda: rda.DefaultConfig(), complete: true}
	c.add(newEntry(1, 2, 3, 4), 10)
	f.Add(encodeCache(cacheKey{"p", 1}, c))
	f.Add([]byte("owl-cache\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, c, err := decodeCache(b, 1000)
		if err != nil {
			return
		}
		if c.len() > 1000 {
			t.Fatalf("%d entries past the bound", c.len())
		}
		if again := encodeCache(k, c); !slices.Equal(again, b) && len(b) < 1<<16 {
			// Varints may be written longer than needed; the decoded
			// form must round-trip though.
			k2, c2, err := decodeCache(again, 1000)
			if err != nil || k2 != k || c2.len() != c.len() {
				t.Fatalf("round trip: %v %v", k2, err)
			}
		}
	})
}

// TestProbeRestartKeepsPaths: a probe made on a data directory where the
// previous run kept a path configuration is ready at once (it captures
// while the collector is away) and has the spool of that run.
func TestProbeRestartKeepsPaths(t *testing.T) {
	dir := t.TempDir()
	pcap := filepath.Join(dir, "x.pcap")
	os.WriteFile(pcap, nil, 0o644)
	cfg := DefaultConfig()
	cfg.ID, cfg.DataDir, cfg.Insecure = "a", filepath.Join(dir, "data"), true
	cfg.Sources = []SourceConfig{{File: pcap}}
	p, err := New(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	pc := &owlv1.PathConfig{Paths: []*owlv1.PathAssignment{{Role: owlv1.Role_ROLE_UPSTREAM,
		Path: &owlv1.Path{Name: "a-b", Upstream: "a", Downstream: "b"}}}, Params: params.Default().ToProto()}
	if err := p.setPaths(pc); err != nil {
		t.Fatal(err)
	}
	p.spool.add(&owlv1.EpochReport{Path: "a-b", Epoch: 1})
	p.disk.close()

	p2, err := New(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.disk.close()
	select {
	case <-p2.ready:
	default:
		t.Fatal("a restarted probe waits for the collector's path configuration")
	}
	if got := p2.pipes[0].paths.Load().paths; len(got) != 1 || got[0].path.Name != "a-b" {
		t.Errorf("paths after restart: %v", got)
	}
	if p2.spool.len() != 1 {
		t.Errorf("spool after restart: %d messages, want 1", p2.spool.len())
	}
}

// TestEvictedCachesLogged: outstanding caches evicted are logged at most
// once every lostWarnEvery, each line with the count since the last; a
// count held back goes out with the next call after the interval.
func TestEvictedCachesLogged(t *testing.T) {
	var logged bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cs := newCacheStore(2, 1<<30)
	cs.log = slog.New(slog.NewTextHandler(&logged, nil))
	cs.now = func() time.Time { return now }
	put := func(e int64) {
		c := &epochCache{rda: rda.DefaultConfig(), complete: true}
		c.add(newEntry(uint64(e), 1, 1, 1), 10)
		cs.put("p", e, c)
	}
	lines := func() []string {
		var out []string
		for _, l := range strings.Split(logged.String(), "\n") {
			if strings.Contains(l, "evicted before the collector released") {
				out = append(out, l)
			}
		}
		return out
	}
	for e := int64(1); e <= 5; e++ {
		put(e) // retention 2: from epoch 3 on, each put evicts one outstanding
	}
	if l := lines(); len(l) != 1 || !strings.Contains(l[0], "evicted=1 evicted_total=1 ") || !strings.Contains(l[0], "level=WARN") {
		t.Fatalf("after 3 evictions in no time: %q, want one line of one", l)
	}
	now = now.Add(lostWarnEvery)
	put(6)
	if l := lines(); len(l) != 2 || !strings.Contains(l[1], "evicted=3 evicted_total=4 last_path=p last_epoch=4") {
		t.Fatalf("after the interval: %q, want a second line of 3", l)
	}
	now = now.Add(time.Second)
	put(7) // evicts epoch 5, held back
	now = now.Add(lostWarnEvery)
	cs.release("p", 7)
	if l := lines(); len(l) != 3 || !strings.Contains(l[2], "evicted=1 evicted_total=5 last_path=p last_epoch=5") {
		t.Fatalf("held-back count: %q, want a third line of 1", l)
	}
	now = now.Add(lostWarnEvery)
	cs.release("p", 6)
	if n, _, _ := cs.lostCounts(); len(lines()) != 3 || n != 5 {
		t.Errorf("%d lines, %d evicted counted; want 3 and 5 (no line without an eviction)", len(lines()), n)
	}
}

// TestDataDirDropsCounted: a damaged spool file dropped at start, and a
// spooled message that cannot be written, show in
// owl_probe_data_dir_dropped_total.
func TestDataDirDropsCounted(t *testing.T) {
	dir := t.TempDir()
	pcap := filepath.Join(dir, "x.pcap")
	os.WriteFile(pcap, nil, 0o644)
	cfg := DefaultConfig()
	cfg.ID, cfg.DataDir, cfg.Insecure = "a", filepath.Join(dir, "data"), true
	cfg.Sources = []SourceConfig{{File: pcap}}
	p, err := New(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	p.spool.add(&owlv1.EpochReport{Path: "a-b", Epoch: 1})
	p.spool.add(&owlv1.EpochReport{Path: "a-b", Epoch: 2})
	p.disk.close()
	os.WriteFile(p.disk.msgName(1), []byte("\xff\xff garbage"), 0o644)

	p2, err := New(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.disk.close()
	if n := p2.spool.len(); n != 1 {
		t.Errorf("spool after damage: %d messages, want 1", n)
	}
	// A spool write that fails: a file where the spool directory was.
	spoolDir := filepath.Join(cfg.DataDir, "spool")
	os.RemoveAll(spoolDir)
	os.WriteFile(spoolDir, nil, 0o644)
	p2.spool.add(&owlv1.EpochReport{Path: "a-b", Epoch: 3})

	want := `# HELP owl_probe_data_dir_dropped_total Data directory losses: unreadable spool and cache files dropped at start, spooled messages not written.
# TYPE owl_probe_data_dir_dropped_total counter
owl_probe_data_dir_dropped_total{what="cache_file"} 0
owl_probe_data_dir_dropped_total{what="spool_file"} 1
owl_probe_data_dir_dropped_total{what="spool_write"} 1
`
	if err := testutil.GatherAndCompare(p2.reg, strings.NewReader(want), "owl_probe_data_dir_dropped_total"); err != nil {
		t.Error(err)
	}
}

// TestUnreleasedRefs: a Hello lists the reported epochs not released,
// oldest first, up to its bound.
func TestUnreleasedRefs(t *testing.T) {
	cs := newCacheStore(8, 1<<30)
	cfg := rda.Config{Banks: 2, Buckets: 64, Seed: 7, Check: true}
	for _, k := range []cacheKey{{"b", 4}, {"a", 4}, {"a", 2}, {"a", 3}, {"b", 1}} {
		cs.put(k.path, k.epoch, &epochCache{rda: cfg, complete: true})
	}
	cs.release("a", 3)
	var got []string
	for _, r := range cs.unreleasedRefs(3) {
		got = append(got, fmt.Sprintf("%s/%d", r.GetPath(), r.GetEpoch()))
	}
	if want := []string{"b/1", "a/2", "a/4"}; !slices.Equal(got, want) {
		t.Errorf("unreleased %v, want %v", got, want)
	}
	if n := len(cs.unreleasedRefs(maxHelloUnreleased)); n != 4 {
		t.Errorf("%d unreleased listed, want 4", n)
	}
}

// TestSpoolDrained: a spool is drained (the probe may say SourcesDone)
// only once it is finished and every message is acknowledged; the last
// acknowledgement wakes the waiting clients.
func TestSpoolDrained(t *testing.T) {
	s := newSpool(8, 1<<20)
	if s.drained() {
		t.Fatal("an empty spool that may still take reports is drained")
	}
	s.add(&owlv1.EpochReport{Path: "p", Epoch: 1})
	s.finish()
	if s.drained() {
		t.Fatal("drained with a report unacknowledged")
	}
	woke := s.wait()
	s.ack(1)
	select {
	case <-woke:
	default:
		t.Fatal("the last acknowledgement did not wake the clients")
	}
	if !s.drained() {
		t.Fatal("finished and every report acknowledged, not drained")
	}
}
