package store

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestGroupCommit: writes that come together share transactions, and a
// failing write fails alone.
func TestGroupCommit(t *testing.T) {
	s := openTest(t)
	const n = 64
	bad := errors.New("bad write")
	errs := make([]error, n)
	var start, wg sync.WaitGroup
	start.Add(1)
	for i := range n {
		wg.Go(func() {
			start.Wait()
			errs[i] = s.update(func(tx *bolt.Tx) error {
				if i == 7 {
					return bad
				}
				return tx.Bucket(bucketPending).Put([]byte(fmt.Sprintf("k%02d", i)), []byte{byte(i)})
			})
		})
	}
	start.Done()
	wg.Wait()
	for i, err := range errs {
		if (i == 7) != errors.Is(err, bad) || i != 7 && err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		for i := range n {
			if got := tx.Bucket(bucketPending).Get([]byte(fmt.Sprintf("k%02d", i))); (got != nil) == (i == 7) {
				t.Errorf("key %d stored: %v", i, got)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d writes in %d transactions", n, s.commits.txs)
	if s.commits.txs >= n {
		t.Errorf("%d writes took %d transactions: none shared", n, s.commits.txs)
	}
}

// TestCommitInterval: with an interval set, a lone writer's writes are
// committed at once, one after the other; under load (writers that
// come while a transaction runs) each transaction starts at least the
// interval after the one before.
func TestCommitInterval(t *testing.T) {
	s := openTest(t)
	const interval = 40 * time.Millisecond
	s.SetCommitInterval(interval)
	var mu sync.Mutex
	first := map[uint64]time.Time{} // transaction → when its first write ran
	write := func(key string) error {
		return s.update(func(tx *bolt.Tx) error {
			mu.Lock()
			if _, ok := first[uint64(tx.ID())]; !ok {
				first[uint64(tx.ID())] = time.Now()
			}
			mu.Unlock()
			time.Sleep(2 * time.Millisecond) // a transaction takes a while: writes pile up
			return tx.Bucket(bucketPending).Put([]byte(key), []byte{1})
		})
	}
	for i := range 5 {
		if err := write(fmt.Sprintf("lone%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if s.commits.waits != 0 {
		t.Errorf("a lone writer waited %d times", s.commits.waits)
	}
	clear(first)
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for i := range 4 {
				if err := write(fmt.Sprintf("load%d-%d", g, i)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if len(first) >= 24 || s.commits.waits == 0 {
		t.Errorf("24 writes under load: %d transactions, %d waits", len(first), s.commits.waits)
	}
	// Every transaction started under load started the interval after
	// the one before, by the commit's own clock (a transaction's first
	// write can come late on a loaded machine: a CI run under the race
	// detector saw two 3 ms apart that way).
	if s.commits.loadTxs == 0 || s.commits.loadGap < interval {
		t.Errorf("%d transactions under load, the closest %v after the one before, want at least %v", s.commits.loadTxs, s.commits.loadGap, interval)
	}
}
