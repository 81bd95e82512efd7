package yjs

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
)

// MergeUpdates merges Yjs v1 updates into one update that applies to the
// same document state as applying all of them, in any order (the
// semantics of Yjs mergeUpdates). Per client the structs are ordered by
// clock; where updates overlap, items are split at every item boundary any
// of them has and one copy of each piece is kept (a live item is
// preferred to its deleted or garbage-collected copy, then the smaller
// encoding); gaps become skips; delete sets are unioned and merged, and
// every range any input has deleted or garbage-collected joins the delete
// set.
//
// The result depends only on the set of updates: it is byte-identical for
// any order or grouping of the same inputs (MergeUpdates(a, b) ==
// MergeUpdates(b, a), MergeUpdates(MergeUpdates(a, b), c) ==
// MergeUpdates(a, MergeUpdates(b, c))), and merging an update that is
// already contained changes nothing. An input that is not a valid update
// or exceeds the package limits is refused with an error; so is a result
// past MaxUpdateBytes or MaxStructs.
func MergeUpdates(updates ...[]byte) ([]byte, error) {
	all := make([]*update, 0, len(updates))
	for i, b := range updates {
		u, err := decode(b)
		if err != nil {
			return nil, fmt.Errorf("update %d: %w", i, err)
		}
		all = append(all, u)
	}
	return merge(all)
}

func merge(all []*update) ([]byte, error) {
	items := map[uint64][]*item{}
	gcs := map[uint64][]span{}
	deletes := map[uint64][]span{}
	for _, u := range all {
		for c, its := range u.items {
			items[c] = append(items[c], its...)
			for _, it := range its {
				if it.deleted() {
					deletes[c] = append(deletes[c], span{it.id.clock, it.length})
				}
			}
		}
		for c, s := range u.gcs {
			gcs[c] = append(gcs[c], s...)
			deletes[c] = append(deletes[c], s...)
		}
		for c, s := range u.deletes {
			deletes[c] = append(deletes[c], s...)
		}
	}
	clients := make([]uint64, 0, len(items)+len(gcs))
	for c := range items {
		clients = append(clients, c)
	}
	for c := range gcs {
		if _, ok := items[c]; !ok {
			clients = append(clients, c)
		}
	}
	slices.Sort(clients)
	slices.Reverse(clients) // Yjs writes higher client ids first

	w := &writer{}
	w.uvarint(uint64(len(clients)))
	total := 0
	for _, c := range clients {
		structs, err := clientStructs(items[c], gcs[c], MaxStructs-total)
		if err != nil {
			return nil, err
		}
		total += len(structs)
		w.uvarint(uint64(len(structs)))
		w.uvarint(c)
		w.uvarint(structs[0].clock)
		for _, s := range structs {
			switch {
			case s.item != nil:
				s.item.write(w)
			case s.gc:
				w.byte(refGC)
				w.uvarint(s.length)
			default:
				w.byte(refSkip)
				w.uvarint(s.length)
			}
		}
		if len(w.buf) > MaxUpdateBytes {
			return nil, fmt.Errorf("yjs: merged update exceeds %d bytes", MaxUpdateBytes)
		}
	}
	if err := writeDeleteSet(w, deletes); err != nil {
		return nil, err
	}
	if len(w.buf) > MaxUpdateBytes {
		return nil, fmt.Errorf("yjs: merged update exceeds %d bytes", MaxUpdateBytes)
	}
	return w.buf, nil
}

// outStruct is one struct of a merged client: an item, a GC run or a skip.
type outStruct struct {
	clock, length uint64
	item          *item
	gc            bool
}

// clientStructs merges one client's items and GC spans into its struct
// sequence (at least one struct; at most limit).
func clientStructs(items []*item, gcs []span, limit int) ([]outStruct, error) {
	// Item pieces: every item cut at every item boundary inside it.
	bounds := make([]uint64, 0, 2*len(items))
	for _, it := range items {
		bounds = append(bounds, it.id.clock, it.end())
	}
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	// Identical ranges first: keep the best copy, so nested duplicates
	// are not cut again and again.
	slices.SortFunc(items, func(a, b *item) int {
		if c := cmp.Or(cmp.Compare(a.id.clock, b.id.clock), cmp.Compare(a.length, b.length)); c != 0 {
			return c
		}
		return better(a, b)
	})
	items = slices.CompactFunc(items, func(a, b *item) bool { return a.id.clock == b.id.clock && a.length == b.length })
	// A piece is a reference until it is chosen, so overlapping inputs
	// cost little memory; ties are broken on the encoded slices.
	type piece struct {
		it       *item
		from, to uint64 // clocks
	}
	var cand []piece
	for _, it := range items {
		i, _ := slices.BinarySearch(bounds, it.id.clock)
		from := it.id.clock
		for j := i + 1; j < len(bounds) && bounds[j] <= it.end(); j++ {
			if len(cand) >= 2*limit {
				return nil, fmt.Errorf("yjs: merge needs more than %d structs", MaxStructs)
			}
			cand = append(cand, piece{it, from, bounds[j]})
			from = bounds[j]
		}
	}
	slices.SortFunc(cand, func(a, b piece) int {
		if c := cmp.Compare(a.from, b.from); c != 0 || a.it == b.it {
			return c
		}
		return better(a.it.slice(a.from-a.it.id.clock, a.to-a.it.id.clock), b.it.slice(b.from-b.it.id.clock, b.to-b.it.id.clock))
	})
	cand = slices.CompactFunc(cand, func(a, b piece) bool { return a.from == b.from })
	pieces := make([]*item, len(cand))
	for i, p := range cand {
		pieces[i] = p.it.slice(p.from-p.it.id.clock, p.to-p.it.id.clock)
	}

	// GC runs where no item covers the clocks.
	slices.SortFunc(gcs, func(a, b span) int { return cmp.Compare(a.clock, b.clock) })
	gcs = mergeSpans(gcs)
	var out []outStruct
	add := func(s outStruct) error {
		if n := len(out); n > 0 {
			prev := &out[n-1]
			if end := prev.clock + prev.length; end < s.clock {
				out = append(out, outStruct{clock: end, length: s.clock - end})
			} else if prev.gc && s.gc && end == s.clock {
				prev.length += s.length
				return nil
			}
		}
		if len(out) >= limit {
			return fmt.Errorf("yjs: merge needs more than %d structs", MaxStructs)
		}
		out = append(out, s)
		return nil
	}
	g := 0
	for _, p := range pieces {
		for g < len(gcs) && gcs[g].clock < p.id.clock {
			run := gcs[g]
			if run.clock+run.length > p.id.clock {
				// The run reaches into the piece: emit its head, keep the rest.
				gcs[g] = span{p.id.clock, run.clock + run.length - p.id.clock}
				run.length = p.id.clock - run.clock
			} else {
				g++
			}
			if err := add(outStruct{clock: run.clock, length: run.length, gc: true}); err != nil {
				return nil, err
			}
		}
		// Drop the GC clocks this piece covers.
		for g < len(gcs) && gcs[g].clock < p.end() {
			if run := gcs[g]; run.clock+run.length > p.end() {
				gcs[g] = span{p.end(), run.clock + run.length - p.end()}
				break
			}
			g++
		}
		if err := add(outStruct{clock: p.id.clock, length: p.length, item: p}); err != nil {
			return nil, err
		}
	}
	for ; g < len(gcs); g++ {
		if err := add(outStruct{clock: gcs[g].clock, length: gcs[g].length, gc: true}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// better orders two copies of the same clocks: a live item before a
// deleted one, then the smaller encoding (any total order would do; this
// one makes the result independent of input order).
func better(a, b *item) int {
	if a.deleted() != b.deleted() {
		if b.deleted() {
			return -1
		}
		return 1
	}
	if a == b {
		return 0
	}
	wa, wb := &writer{}, &writer{}
	a.write(wa)
	b.write(wb)
	return bytes.Compare(wa.buf, wb.buf)
}

// mergeSpans merges sorted spans that overlap or touch.
func mergeSpans(s []span) []span {
	out := s[:0]
	for _, x := range s {
		if n := len(out); n > 0 && out[n-1].clock+out[n-1].length >= x.clock {
			out[n-1].length = max(out[n-1].length, x.clock+x.length-out[n-1].clock)
			continue
		}
		out = append(out, x)
	}
	return out
}

// writeDeleteSet writes the union of the delete ranges, clients in
// descending order, ranges sorted and merged. More than MaxDeleteRanges
// ranges is an error (the result would not decode).
func writeDeleteSet(w *writer, ds map[uint64][]span) error {
	clients := make([]uint64, 0, len(ds))
	total := 0
	for c, s := range ds {
		if len(s) == 0 {
			continue
		}
		slices.SortFunc(s, func(a, b span) int { return cmp.Compare(a.clock, b.clock) })
		s = mergeSpans(s)
		ds[c] = s
		total += len(s)
		clients = append(clients, c)
	}
	if total > MaxDeleteRanges {
		return fmt.Errorf("yjs: merge needs more than %d delete ranges", MaxDeleteRanges)
	}
	slices.Sort(clients)
	slices.Reverse(clients)
	w.uvarint(uint64(len(clients)))
	for _, c := range clients {
		w.uvarint(c)
		w.uvarint(uint64(len(ds[c])))
		for _, x := range ds[c] {
			w.uvarint(x.clock)
			w.uvarint(x.length)
		}
	}
	return nil
}
