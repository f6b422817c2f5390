package keyspace

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/naming"
)

// hashTag returns the part of key Redis Cluster hashes: the text between the
// first '{' and the first '}' after it, if not empty; otherwise "".
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return ""
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return ""
	}
	return key[open+1 : open+1+end]
}

// validNamespace is broker's rule for namespaces: letters, digits and
// '._-:', at most 64 bytes.
func validNamespace(ns string) bool {
	if ns == "" || len(ns) > 64 {
		return false
	}
	for _, r := range ns {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-', r == ':':
		default:
			return false
		}
	}
	return true
}

// FuzzKeys: for every valid namespace and queue name and every shard count,
// each key of every shard starts with the namespace, hashes by exactly the
// shard's name (one Cluster slot a shard), and gives back the namespace and
// the shard it was built from, which maps back to its queue; so no two
// (namespace, queue) pairs share a key. The namespace-wide keys have no
// hash tag.
func FuzzKeys(f *testing.F) {
	for _, s := range [][2]string{{"delayq", "default"}, {"a:b", "q"}, {"ns", "q}x"}, {"n{s", "q"}, {"", "q"}, {"ns", "{q}"}, {"ns:", "a.b-c_d"}} {
		f.Add(s[0], s[1], uint8(1))
	}
	f.Fuzz(func(t *testing.T, ns, queue string, n uint8) {
		if !validNamespace(ns) || naming.Queue(queue) != nil || n == 0 {
			return
		}
		for _, s := range newQueue(ns, queue, int(n)).Shards() {
			if Logical(s.Name()) != queue || s.Queue() != queue {
				t.Fatalf("shard %q of queue %q maps back to %q", s.Name(), queue, Logical(s.Name()))
			}
			v := reflect.ValueOf(s.Keys())
			for i := range v.NumField() {
				field := v.Type().Field(i).Name
				key := v.Field(i).String()
				tag := s.Name()
				if field == "Wake" || field == "Cancel" {
					tag = queue // one channel for the shards of a queue
				}
				if !strings.HasPrefix(key, ns+":{"+tag+"}:") {
					t.Fatalf("%s key %q does not start with %q", field, key, ns+":{"+tag+"}:")
				}
				if got := hashTag(key); got != tag {
					t.Fatalf("%s key %q hashes by %q, want %q", field, key, got, tag)
				}
				gotNS, rest, _ := strings.Cut(key, ":{")
				gotTag, _, _ := strings.Cut(rest, "}")
				if gotNS != ns || gotTag != tag {
					t.Fatalf("key %q parses back as (%q, %q), want (%q, %q)", key, gotNS, gotTag, ns, tag)
				}
			}
		}
		for _, k := range []string{QueuesKey(ns), ShardsKey(ns)} {
			if hashTag(k) != "" || strings.ContainsAny(k, "{}*?[]\\") {
				t.Fatalf("namespace key %q has a hash tag or glob characters", k)
			}
		}
	})
}

func TestShardNameWindows(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 31, 64, MaxShards} {
		for k, s := range newQueue("ns", "queue", n).Shards() {
			if Logical(s.Name()) != "queue" || s.Index() != k {
				t.Fatalf("shard %q (index %d) does not map back to its queue as shard %d", s.Name(), s.Index(), k)
			}
			if n == 1 {
				continue
			}
			from, to := k*ClusterSlots/n, (k+1)*ClusterSlots/n
			if sl := s.Slot(); sl < from || sl >= to {
				t.Fatalf("%d shards: shard %d (%s) in slot %d, outside [%d, %d)", n, k, s.Name(), sl, from, to)
			}
		}
	}
	// The shard of an id is fixed by the id alone.
	q := newQueue("ns", "q", 7)
	if a, b := q.Route("order-42"), q.Route("order-42"); a != b {
		t.Fatalf("order-42 went to %s and %s", a.Name(), b.Name())
	}
}

func TestShareAddsUp(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 3, 4, 7, 256} {
		q := newQueue("ns", "q", n)
		for _, total := range []int{0, 1, 2, 3, 5, 10, 255, 256, 257, 10_000} {
			sum, lo, hi := 0, total, 0
			for k := range n {
				part := q.Share(k, total)
				sum += part
				lo, hi = min(lo, part), max(hi, part)
			}
			if sum != total || hi-lo > 1 {
				t.Fatalf("%d shards, total %d: parts sum to %d, spread %d..%d", n, total, sum, lo, hi)
			}
		}
	}
}

// counts is an in-memory Counts.
type counts struct {
	stored   map[string]int
	occupied bool
	stores   map[string]int // Store calls by queue
}

func (c *counts) Count(_ context.Context, q string) (int, bool, error) {
	n, ok := c.stored[q]
	return n, ok, nil
}

func (c *counts) Store(_ context.Context, q string, n int) (int, error) {
	if c.stores != nil {
		c.stores[q]++
	}
	if have, ok := c.stored[q]; ok {
		return have, nil
	}
	c.stored[q] = n
	return n, nil
}

func (c *counts) Occupied(context.Context, Shard) (bool, error) { return c.occupied, nil }

func TestRouterDeclare(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := &counts{stored: map[string]int{}}
	r := NewRouter("ns", c)
	if q, err := r.Queue(ctx, "a"); err != nil || q.Sharded() {
		t.Fatalf("undeclared queue: %v, sharded %v", err, q.Sharded())
	}
	if _, ok := c.stored["a"]; ok {
		t.Fatal("reading a queue stored a count")
	}
	if q, err := r.Declare(ctx, "b", 4); err != nil || len(q.Shards()) != 4 {
		t.Fatalf("declare 4: %v, %d shards", err, len(q.Shards()))
	}
	if _, err := r.Declare(ctx, "b", 3); err == nil || !strings.Contains(err.Error(), "has 4 shard(s), not 3") {
		t.Fatalf("redeclare with 3: %v", err)
	}
	if q, err := r.Place(ctx, "c"); err != nil || q.Sharded() || c.stored["c"] != 1 {
		t.Fatalf("place: %v, stored %d", err, c.stored["c"])
	}
	c.occupied = true
	if _, err := r.Declare(ctx, "d", 2); err == nil || !strings.Contains(err.Error(), "holds unsharded jobs") {
		t.Fatalf("declare over unsharded jobs: %v", err)
	}
	if _, err := r.Declare(ctx, "e", 0); err == nil {
		t.Fatal("0 shards accepted")
	}
}

// A Router lists again (Counts.Store, with the count it holds) a queue it
// places jobs in or works, at most once per RelistEvery, so that a queue
// forgotten while this process held its count comes back with its next
// use; a queue it holds no count of is never created by Touch.
func TestRouterRelists(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := &counts{stored: map[string]int{}, stores: map[string]int{}}
	r := NewRouter("ns", c)
	now := time.Unix(1_700_000_000, 0)
	r.now = func() time.Time { return now }
	if _, err := r.Declare(ctx, "s", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Place(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		r.Place(ctx, "p")
		r.Place(ctx, "s")
		r.Touch(ctx, "s")
	}
	if c.stores["p"] != 1 || c.stores["s"] != 1 {
		t.Fatalf("stores within RelistEvery: %v, want one each", c.stores)
	}
	// Forgotten meanwhile (its count removed too).
	delete(c.stored, "p")
	delete(c.stored, "s")
	now = now.Add(RelistEvery)
	r.Place(ctx, "p")
	r.Touch(ctx, "s")
	r.Touch(ctx, "s")
	if c.stores["p"] != 2 || c.stores["s"] != 2 || c.stored["p"] != 1 || c.stored["s"] != 3 {
		t.Fatalf("after RelistEvery: stores %v, counts %v; want one more each, with the counts held", c.stores, c.stored)
	}
	r.Touch(ctx, "typo")
	if _, ok := c.stored["typo"]; ok || c.stores["typo"] != 0 {
		t.Fatal("Touch of a queue with no count stored one")
	}
}
