package store

import (
	"errors"
	"fmt"
	"sync"
	"testing"

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
