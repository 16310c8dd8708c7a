package store

import (
	"sync"

	bolt "go.etcd.io/bbolt"
)

// groupCommit runs writes in shared transactions: a write that comes while
// a transaction is being committed waits and goes, with every other that
// came meanwhile, into the next one. Alone, a write is committed at once;
// under load, one commit (and one fsync) serves many. The first waiting
// writer commits for the others.
type groupCommit struct {
	mu      sync.Mutex
	queue   []*commitCall
	running bool
	txs     int // transactions committed, for tests
}

// commitCall is one write waiting for its transaction.
type commitCall struct {
	fn   func(*bolt.Tx) error
	done chan error
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
		batch := g.queue
		g.queue = nil
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
	err := s.db.Update(func(tx *bolt.Tx) error {
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
		c.done <- s.db.Update(c.fn)
	}
}
