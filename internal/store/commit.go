package store

import (
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// groupCommit runs writes in shared transactions: a write that comes while
// a transaction is being committed waits and goes, with every other that
// came meanwhile, into the next one. Alone, a write is committed at once;
// under load, one commit (and one fsync) serves many. The first waiting
// writer commits for the others.
//
// Under load a transaction also starts no sooner than interval after the
// one before started: a transaction rewrites every page its writes touch
// (each path's leaves of the result and index buckets, the branches above
// them, the freelist and the meta page), so fewer, larger ones write less
// for the same records. "Under load" is more than one write waiting, or
// the transaction before having had more than one: a lone writer is not
// held back.
type groupCommit struct {
	mu        sync.Mutex
	queue     []*commitCall
	running   bool
	interval  time.Duration
	last      time.Time // when the last transaction started
	lastBatch int       // writes in it
	txs       int       // transactions committed, for tests
	waits     int       // transactions held back by interval, for tests
	// loadTxs are the transactions started under load, and loadGap the
	// least time from the start of the one before to one's, for tests.
	loadTxs int
	loadGap time.Duration
}

// commitCall is one write waiting for its transaction.
type commitCall struct {
	fn   func(*bolt.Tx) error
	done chan error
}

// SetCommitInterval makes transactions under load start at least d
// apart (0: as soon as the one before is done).
func (s *Store) SetCommitInterval(d time.Duration) {
	s.commits.mu.Lock()
	defer s.commits.mu.Unlock()
	s.commits.interval = d
}

// update runs fn in a write transaction shared with other writes. fn may
// run more than once (alone, after a shared transaction failed): it must
// do the same each time.
func (s *Store) update(fn func(*bolt.Tx) error) error {
	g := &s.commits
	c := &commitCall{fn: fn, done: make(chan error, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, c)
	if g.running {
		g.mu.Unlock()
		return <-c.done
	}
	g.running = true
	for len(g.queue) > 0 {
		loaded := len(g.queue) > 1 || g.lastBatch > 1
		if g.interval > 0 && loaded {
			if d := g.interval - time.Since(g.last); d > 0 {
				g.waits++
				g.mu.Unlock()
				time.Sleep(d)
				g.mu.Lock()
			}
		}
		batch := g.queue
		g.queue = nil
		now := time.Now()
		if loaded && !g.last.IsZero() {
			if gap := now.Sub(g.last); g.loadTxs == 0 || gap < g.loadGap {
				g.loadGap = gap
			}
			g.loadTxs++
		}
		g.last, g.lastBatch = now, len(batch)
		g.txs++
		g.mu.Unlock()
		s.commit(batch)
		g.mu.Lock()
	}
	g.running = false
	g.mu.Unlock()
	return <-c.done
}

// commit runs a batch of writes in one transaction. When it fails, each
// write runs again in a transaction of its own, so that one failing write
// fails alone.
func (s *Store) commit(batch []*commitCall) {
	err := update(s.db, func(tx *bolt.Tx) error {
		for _, c := range batch {
			if err := c.fn(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil || len(batch) == 1 {
		for _, c := range batch {
			c.done <- err
		}
		return
	}
	for _, c := range batch {
		c.done <- update(s.db, c.fn)
	}
}
