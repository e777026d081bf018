// Passivation strategies: which active entity a region passivates when the type's
// MaxActive is passed (TypeSettings.PassivationStrategy).
//
// The strategies are small implementations here rather than a cache library's: a
// cache (ristretto, otter, theine) holds values and evicts them on its own schedule,
// sampled or asynchronously, while a region must be told, at the moment an entity
// becomes active, exactly which other entity to stop, and tests need the choice to be
// deterministic. Each operation is O(1) (LFU: O(log n)) under the region's evictMu.

package sharding

import (
	"container/heap"
	"container/list"
	"fmt"
)

// Passivation strategies by name (TypeSettings.PassivationStrategy).
const (
	// PassivationLRU passivates the least recently used entity.
	PassivationLRU = "lru"
	// PassivationLFU passivates the least frequently used entity (counting the
	// messages of its current activation), the least recently used among equals.
	PassivationLFU = "lfu"
	// PassivationWTinyLFU is the composite strategy: a window LRU (1% of the cap) in
	// front of a segmented LRU main area (80% protected), with a W-TinyLFU admission
	// filter: an entity leaving the window replaces the main area's victim only if a
	// count-min sketch of recent message frequencies (which outlives activations)
	// says it is used more often.
	PassivationWTinyLFU = "w-tinylfu"
)

// policy tracks a region's active entities (keys K) and chooses which to passivate
// to keep them within a capacity. It is not safe for concurrent use.
type policy[K comparable] interface {
	// add records k as newly active, without counting a use; it returns the
	// entities to passivate (never k) to stay within the capacity.
	add(k K) []K
	// access counts a use of k (a handled message); an untracked k is added.
	access(k K) []K
	// remove forgets k (passivated or handed off); an untracked k is ignored.
	remove(k K)
	// len is the number of entities tracked.
	len() int
}

// newPolicy returns the strategy's policy for a capacity >= 1; hash gives a key's
// stable hash (W-TinyLFU's sketch counts by it, across activations).
func newPolicy[K comparable](strategy string, capacity int, hash func(K) uint64) (policy[K], error) {
	switch strategy {
	case "", PassivationLRU:
		return newLRUPolicy[K](capacity), nil
	case PassivationLFU:
		return newLFUPolicy[K](capacity), nil
	case PassivationWTinyLFU:
		return newWTinyLFUPolicy(capacity, hash), nil
	}
	return nil, fmt.Errorf("sharding: passivation strategy %q (want %s, %s or %s)", strategy, PassivationLRU, PassivationLFU, PassivationWTinyLFU)
}

// lruPolicy: a list, most recently used at the front.
type lruPolicy[K comparable] struct {
	capacity int
	order    *list.List // of K
	at       map[K]*list.Element
}

func newLRUPolicy[K comparable](capacity int) *lruPolicy[K] {
	return &lruPolicy[K]{capacity: capacity, order: list.New(), at: map[K]*list.Element{}}
}

func (p *lruPolicy[K]) add(k K) []K {
	if el, ok := p.at[k]; ok {
		p.order.MoveToFront(el)
		return nil
	}
	var victims []K
	for p.order.Len() >= p.capacity {
		v := p.order.Remove(p.order.Back()).(K)
		delete(p.at, v)
		victims = append(victims, v)
	}
	p.at[k] = p.order.PushFront(k)
	return victims
}

func (p *lruPolicy[K]) access(k K) []K { return p.add(k) }

func (p *lruPolicy[K]) remove(k K) {
	if el, ok := p.at[k]; ok {
		p.order.Remove(el)
		delete(p.at, k)
	}
}

func (p *lruPolicy[K]) len() int { return p.order.Len() }

// lfuPolicy: a min-heap by (uses, last use).
type lfuPolicy[K comparable] struct {
	capacity int
	tick     uint64
	h        lfuHeap[K]
	at       map[K]*lfuItem[K]
}

type lfuItem[K comparable] struct {
	k          K
	uses, last uint64
	index      int
}

type lfuHeap[K comparable] []*lfuItem[K]

func (h lfuHeap[K]) Len() int { return len(h) }
func (h lfuHeap[K]) Less(i, j int) bool {
	if h[i].uses != h[j].uses {
		return h[i].uses < h[j].uses
	}
	return h[i].last < h[j].last
}
func (h lfuHeap[K]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *lfuHeap[K]) Push(x any) {
	it := x.(*lfuItem[K])
	it.index = len(*h)
	*h = append(*h, it)
}
func (h *lfuHeap[K]) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}

func newLFUPolicy[K comparable](capacity int) *lfuPolicy[K] {
	return &lfuPolicy[K]{capacity: capacity, at: map[K]*lfuItem[K]{}}
}

func (p *lfuPolicy[K]) add(k K) []K {
	p.tick++
	if it, ok := p.at[k]; ok {
		it.last = p.tick
		heap.Fix(&p.h, it.index)
		return nil
	}
	var victims []K
	for len(p.h) >= p.capacity {
		v := heap.Pop(&p.h).(*lfuItem[K])
		delete(p.at, v.k)
		victims = append(victims, v.k)
	}
	it := &lfuItem[K]{k: k, last: p.tick}
	heap.Push(&p.h, it)
	p.at[k] = it
	return victims
}

func (p *lfuPolicy[K]) access(k K) []K {
	victims := p.add(k)
	it := p.at[k]
	it.uses++
	heap.Fix(&p.h, it.index)
	return victims
}

func (p *lfuPolicy[K]) remove(k K) {
	if it, ok := p.at[k]; ok {
		heap.Remove(&p.h, it.index)
		delete(p.at, k)
	}
}

func (p *lfuPolicy[K]) len() int { return len(p.h) }

// Where a W-TinyLFU entry is.
const (
	inWindow = iota
	inProbation
	inProtected
)

type wEntry[K comparable] struct {
	k   K
	seg int
}

// wtinylfuPolicy: window LRU, then a main segmented LRU (probation and protected),
// admission between them by a frequency sketch.
type wtinylfuPolicy[K comparable] struct {
	hash                             func(K) uint64
	windowCap, protectedCap, mainCap int
	window, probation, protected     *list.List // of *wEntry[K], most recent at the front
	at                               map[K]*list.Element
	sketch                           *countMinSketch
}

func newWTinyLFUPolicy[K comparable](capacity int, hash func(K) uint64) *wtinylfuPolicy[K] {
	windowCap := max(1, capacity/100)
	if capacity == 1 {
		windowCap = 0 // the only room is the main area
	}
	mainCap := capacity - windowCap
	return &wtinylfuPolicy[K]{
		hash: hash, windowCap: windowCap, mainCap: mainCap, protectedCap: mainCap * 8 / 10,
		window: list.New(), probation: list.New(), protected: list.New(),
		at: map[K]*list.Element{}, sketch: newCountMinSketch(capacity),
	}
}

func (p *wtinylfuPolicy[K]) seg(s int) *list.List {
	switch s {
	case inWindow:
		return p.window
	case inProbation:
		return p.probation
	}
	return p.protected
}

func (p *wtinylfuPolicy[K]) len() int { return len(p.at) }

// touch moves a tracked entry on a use: to the front of its LRU, a probation entry
// up to protected (demoting protected's LRU to probation past its share).
func (p *wtinylfuPolicy[K]) touch(el *list.Element) {
	en := el.Value.(*wEntry[K])
	switch en.seg {
	case inWindow:
		p.window.MoveToFront(el)
	case inProtected:
		p.protected.MoveToFront(el)
	case inProbation:
		p.probation.Remove(el)
		en.seg = inProtected
		p.at[en.k] = p.protected.PushFront(en)
		if p.protected.Len() > p.protectedCap {
			d := p.protected.Remove(p.protected.Back()).(*wEntry[K])
			d.seg = inProbation
			p.at[d.k] = p.probation.PushFront(d)
		}
	}
}

func (p *wtinylfuPolicy[K]) add(k K) []K {
	if el, ok := p.at[k]; ok {
		p.touch(el)
		return nil
	}
	var victims []K
	// Room for k: past the capacity, one entry leaves; the window's LRU (or, with no
	// window, the newcomer's place is the main area's) competes with the main area's
	// victim when the main area is full.
	if len(p.at) >= p.windowCap+p.mainCap {
		victims = append(victims, p.evict())
	}
	en := &wEntry[K]{k: k, seg: inWindow}
	if p.windowCap == 0 {
		en.seg = inProbation
	}
	p.at[k] = p.seg(en.seg).PushFront(en)
	// The window past its share: its LRU moves to probation (there is room now).
	for p.window.Len() > p.windowCap {
		c := p.window.Remove(p.window.Back()).(*wEntry[K])
		c.seg = inProbation
		p.at[c.k] = p.probation.PushFront(c)
	}
	return victims
}

// evict removes one entry when full: the window's LRU candidate against the main
// area's victim (probation's LRU, else protected's), the less frequent one leaving
// (the candidate on a tie, as TinyLFU keeps the incumbent).
func (p *wtinylfuPolicy[K]) evict() K {
	main := p.probation
	if main.Len() == 0 {
		main = p.protected
	}
	if p.window.Len() == 0 || p.window.Len() < p.windowCap && main.Len() > 0 {
		return p.drop(main.Back())
	}
	cand := p.window.Back()
	if main.Len() == 0 {
		return p.drop(cand)
	}
	victim := main.Back()
	cf := p.sketch.estimate(p.hash(cand.Value.(*wEntry[K]).k))
	vf := p.sketch.estimate(p.hash(victim.Value.(*wEntry[K]).k))
	if cf > vf {
		// The candidate is admitted to probation in the victim's place.
		v := p.drop(victim)
		c := p.window.Remove(cand).(*wEntry[K])
		c.seg = inProbation
		p.at[c.k] = p.probation.PushFront(c)
		return v
	}
	return p.drop(cand)
}

func (p *wtinylfuPolicy[K]) drop(el *list.Element) K {
	en := el.Value.(*wEntry[K])
	p.seg(en.seg).Remove(el)
	delete(p.at, en.k)
	return en.k
}

func (p *wtinylfuPolicy[K]) access(k K) []K {
	p.sketch.increment(p.hash(k))
	return p.add(k)
}

func (p *wtinylfuPolicy[K]) remove(k K) {
	if el, ok := p.at[k]; ok {
		p.drop(el)
	}
}

// countMinSketch counts frequencies in 4 rows of 4-bit counters (saturating at 15;
// a byte each),
// halving every counter after 10 × capacity increments so that old popularity fades.
type countMinSketch struct {
	rows    [4][]uint8
	mask    uint64
	samples int
	resetAt int
}

func newCountMinSketch(capacity int) *countMinSketch {
	// Four counters per entity of the capacity in each row (Caffeine's sketch has
	// 16 per entity in all): a row fills with the one-off entities of a scan before
	// the reset halves it, and narrower rows count them all as frequent.
	width := 16
	for width < 4*capacity {
		width <<= 1
	}
	s := &countMinSketch{mask: uint64(width - 1), resetAt: 10 * max(capacity, 1)}
	for i := range s.rows {
		s.rows[i] = make([]uint8, width)
	}
	return s
}

// index is row i's counter for hash h (a different mix per row).
func (s *countMinSketch) index(h uint64, i int) uint64 {
	h ^= uint64(i+1) * 0x9e3779b97f4a7c15
	h ^= h >> 31
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 29
	return h & s.mask
}

func (s *countMinSketch) increment(h uint64) {
	for i := range s.rows {
		if c := &s.rows[i][s.index(h, i)]; *c < 15 {
			*c++
		}
	}
	if s.samples++; s.samples >= s.resetAt {
		s.samples /= 2
		for i := range s.rows {
			for j := range s.rows[i] {
				s.rows[i][j] >>= 1
			}
		}
	}
}

func (s *countMinSketch) estimate(h uint64) uint8 {
	m := uint8(15)
	for i := range s.rows {
		m = min(m, s.rows[i][s.index(h, i)])
	}
	return m
}

// fnv64 is the FNV-1a hash of s: an entity ID's stable hash for the sketch.
func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
