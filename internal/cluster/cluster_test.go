package cluster

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"
)

func TestOwnerSpreadsAndMovesLittle(t *testing.T) {
	var ms []Member
	for i := range 4 {
		ms = append(ms, Member{Name: fmt.Sprintf("c%d", i)})
	}
	const keys = 4000
	count := map[string]int{}
	before := map[string]string{}
	for k := range keys {
		key := fmt.Sprintf("path-%d", k)
		o := Owner(ms, key).Name
		count[o]++
		before[key] = o
	}
	for _, m := range ms {
		// Each of 4 members should own about a quarter.
		if n := count[m.Name]; n < keys/4*8/10 || n > keys/4*12/10 {
			t.Errorf("%s owns %d of %d keys, want about %d", m.Name, n, keys, keys/4)
		}
	}
	// Removing c2 moves only c2's keys.
	rest := []Member{ms[0], ms[1], ms[3]}
	for key, o := range before {
		now := Owner(rest, key).Name
		if o != "c2" && now != o {
			t.Fatalf("%s moved from %s to %s when c2 left", key, o, now)
		}
		if now == "c2" {
			t.Fatalf("%s still owned by c2", key)
		}
	}
	if o := Owner(nil, "x"); o.Name != "" {
		t.Errorf("owner among no members: %v", o)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []Config{
		{Join: []string{"127.0.0.1:7946"}},
		{Bind: "no-port"},
		{Bind: "127.0.0.1:7946", Join: []string{"host:99999"}},
		{Bind: "127.0.0.1:7946", JoinTimeout: -time.Second},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if err := (Config{Bind: "127.0.0.1:0", Join: []string{"10.0.0.1:7946"}}).Validate(); err != nil {
		t.Error(err)
	}
}

// TestGossip runs three real members on loopback: they agree on the
// members and on every key's owner, and a member's leave moves its keys.
func TestGossip(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var cs []*Cluster
	for i := range 3 {
		cfg := Config{Bind: "127.0.0.1:0", Name: fmt.Sprintf("c%d", i), JoinTimeout: 10 * time.Second}
		if i > 0 {
			cfg.Join = []string{cs[0].Gossip()}
		}
		c, err := Start(cfg, fmt.Sprintf("127.0.0.1:%d", 7700+i), log)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	defer func() {
		for _, c := range cs[:2] {
			_ = c.Leave(time.Second)
		}
	}()
	waitMembers := func(cs []*Cluster, n int) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for _, c := range cs {
			for len(c.Members()) != n {
				if time.Now().After(deadline) {
					t.Fatalf("%s sees %v, want %d members", c.Name(), c.Members(), n)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	waitMembers(cs, 3)
	for _, c := range cs {
		for _, m := range c.Members() {
			if want := fmt.Sprintf("127.0.0.1:%d", 7700+int(m.Name[1]-'0')); m.GRPC != want || m.State != "alive" || m.Self != (m.Name == c.Name()) {
				t.Errorf("%s sees %+v, want gRPC %s", c.Name(), m, want)
			}
		}
	}
	keys := []string{"a", "b", "c", "d", "e", "f", "colate"}
	owners := map[string]string{}
	for _, k := range keys {
		owners[k] = cs[0].Owner(k).Name
		for _, c := range cs[1:] {
			if o := c.Owner(k).Name; o != owners[k] {
				t.Errorf("key %s: %s says %s, %s says %s", k, cs[0].Name(), owners[k], c.Name(), o)
			}
		}
	}
	select {
	case <-cs[0].Changed():
	default:
		t.Error("no change signalled while members joined")
	}
	if err := cs[2].Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	waitMembers(cs[:2], 2)
	for _, k := range keys {
		o := cs[0].Owner(k).Name
		if o == "c2" || owners[k] != "c2" && o != owners[k] {
			t.Errorf("key %s: owner %s before c2 left, %s after", k, owners[k], o)
		}
	}
}

func TestHolders(t *testing.T) {
	var ms []Member
	for i := range 5 {
		ms = append(ms, Member{Name: fmt.Sprintf("c%d", i)})
	}
	for k := range 500 {
		key := fmt.Sprintf("path-%d", k)
		hs := Holders(ms, key, 2)
		if len(hs) != 2 || hs[0].Name == hs[1].Name {
			t.Fatalf("%s: holders %v", key, hs)
		}
		if hs[0] != Owner(ms, key) {
			t.Fatalf("%s: first holder %v, owner %v", key, hs[0], Owner(ms, key))
		}
		// Without the owner, the second holder owns the key, and the
		// third becomes the second.
		all := Holders(ms, key, len(ms))
		rest := slices.DeleteFunc(slices.Clone(ms), func(m Member) bool { return m.Name == hs[0].Name })
		if o := Owner(rest, key); o != hs[1] {
			t.Fatalf("%s: owner %v without %v, want %v", key, o, hs[0], hs[1])
		}
		if h := Holders(rest, key, 2); h[1] != all[2] {
			t.Fatalf("%s: second holder %v without the owner, want %v", key, h[1], all[2])
		}
	}
	if hs := Holders(ms[:1], "x", 2); len(hs) != 1 || hs[0].Name != "c0" {
		t.Errorf("holders among one member: %v", hs)
	}
	if hs := Holders(nil, "x", 2); len(hs) != 0 {
		t.Errorf("holders among no members: %v", hs)
	}
	for _, n := range []int{0, -1} {
		if hs := Holders(ms, "x", n); len(hs) != 0 {
			t.Errorf("%d holders asked for: %v", n, hs)
		}
	}
}
