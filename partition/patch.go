package partition

import (
	"context"
	"errors"
	"slices"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/segstore"
)

// First pages patched forward (issue 45, reconnects). A reconnecting client
// bootstraps its scope again from a fresh pin; its first page at that pin
// is answered from the inline pages kept in memory (segstore.InlinePage)
// until a commit moves the scope's pin, after which the page used to be
// read from the rows and encoded again. SPEC §5 does not let a bootstrap
// section carry a snapshot page and COMMITs together (mixing the two in a
// section is a decode error), so instead the table first page kept for the
// older pin is patched: the changes of the table since its pin are read
// from the log (the in-memory log tail when it covers them), and the page
// is re-assembled from its own encoded rows and the changes' full-row
// encodings, in key order, without a row read or a row encoding. The bytes
// are exactly those a fresh build at the new pin gives
// (TestPatchedFirstPageMatchesFreshBuild): every row whose last change is an upsert in
// scope is the change's row at its version, every row whose last change
// is a delete or an upsert out of scope is gone, every other row is the
// page's.
//
// A page is patched only within these bounds, and is otherwise built from
// rows as before:
const (
	// PatchMaxSeqs is how far behind the partition's max seq the kept
	// page's pin may be (commit seqs, whichever tables they touch).
	PatchMaxSeqs = 256
	// PatchMaxChanges is how many changes of the table (in any scope)
	// the window may hold.
	PatchMaxChanges = 1024
)

// A kept page is patched only when it is a whole table (no row cursor
// after it: rows pushed past a page boundary or pulled back into it by
// the changes would need a row read) and stays under limitSnapshotRows
// rows once patched; its pin must be at or above the horizon (the changes
// since are all in the log). The changes are read up to the partition's
// max seq (not only the new pin): the rows a fresh build reads are the
// rows at the max seq, whatever the pin says.

// pageIndex is the decoded form of a kept first page, attached to it in
// memory (segstore.Cache.SetInlineAux when a page built from rows is first
// patched from; KeepFirstPage for a patched page): its rows as encoded
// bytes in key order, with their row ids.
type pageIndex struct {
	ids  []string
	rows []ssp2.SegmentRowSpan
}

// cost estimates the bytes the index holds beyond the page's own.
func (x *pageIndex) cost() int {
	n := len(x.rows)*(48+16) + 64
	for _, id := range x.ids {
		n += len(id)
	}
	return n
}

// patchFirstPage builds the first page of src at tok's pin (tok has no row
// cursor) from the table first page kept for an older pin of the same key
// and the table's changes since, within the bounds above; false: there is
// no such page, or it is out of bounds, or the log read failed (the caller
// builds the page from rows). A patched page under the inline limit is
// kept at once (its bytes then belong to the inline pages kept: the
// caller must neither modify nor reuse them, nor keep the page again).
func (p *Partition) patchFirstPage(ctx context.Context, src tablePages, tok BootstrapToken) (segstore.Built, bool) {
	segs := p.cfg.Segments
	if segs == nil || tok.RowCursor != nil {
		return segstore.Built{}, false
	}
	old, aux, ok := segs.LatestFirstPage(src.inlineKey(p.name, tok))
	pin := old.Meta.AsOfCommitSeq
	if !ok || old.Meta.NextRowCursor != nil || old.Meta.RowCursor != nil || old.Meta.MediaType != ssp2.MediaRows ||
		pin >= tok.AsOfCommitSeq || pin < src.horizon || src.maxSeq-pin > PatchMaxSeqs {
		return segstore.Built{}, false
	}
	t := src.table
	scan, err := p.scanChanges(ctx, storage.ChangeQuery{Table: t.Name, AfterSeq: pin, UpToSeq: src.maxSeq, LimitChanges: PatchMaxChanges})
	if err != nil || scan.Truncated {
		return segstore.Built{}, false
	}
	idx, _ := aux.(*pageIndex)
	if idx == nil {
		if idx, err = indexPage(t, old.Data); err != nil {
			p.log().Warn("a kept first page does not decode; building it from rows")
			return segstore.Built{}, false
		}
		segs.SetInlineAux(src.inlineKey(p.name, BootstrapToken{AsOfCommitSeq: pin}), idx, idx.cost())
	}
	b, nidx, ok := patchPage(t, p.cfg.Schema.Version, src, idx, scan, tok.AsOfCommitSeq)
	if !ok {
		return segstore.Built{}, false
	}
	segs.CountPatched()
	if len(b.Data) <= p.cfg.InlineSegmentMaxBytes {
		// Kept as built, with its index: the next patch starts from it
		// without decoding it again. Its bytes are the cache's now.
		segs.KeepFirstPage(src.inlineKey(p.name, tok), b, nidx, nidx.cost())
	}
	return b, true
}

// indexPage decodes the rows of an SSG2 page of t into a pageIndex.
func indexPage(t *schema.Table, data []byte) (*pageIndex, error) {
	spans, err := ssp2.SegmentRowSpans(data, t.PK)
	if err != nil {
		return nil, err
	}
	idx := &pageIndex{ids: make([]string, len(spans)), rows: spans}
	for i := range spans {
		id, ok := schema.RenderKey(t.Columns[t.PK], spans[i].Key)
		if !ok {
			return nil, errBadKey
		}
		idx.ids[i] = id
	}
	return idx, nil
}

var errBadKey = errors.New("partition: a kept page's row key does not render")

// patchPage applies scan (the table's changes after the page's pin, in
// commit order) to the page indexed by idx and encodes the result at pin.
// It reports false when the result would not be the table's whole first
// page (limitSnapshotRows rows or more) or a change's row does not fit
// the page's columns.
func patchPage(t *schema.Table, schemaVersion int32, src tablePages, idx *pageIndex, scan storage.ChangeScan, pin int64) (segstore.Built, *pageIndex, bool) {
	last := map[string]*storage.ChangeRecord{}
	for i := range scan.Commits {
		for j := range scan.Commits[i].Changes {
			ch := &scan.Commits[i].Changes[j]
			last[ch.RowID] = ch
		}
	}
	codec := ssp2.NewRowCodec(t.Columns)
	var ups []*storage.ChangeRecord // upserts in scope, by row id
	for _, ch := range last {
		if ch.Op != ssp2.OpUpsert || !storage.MatchScopes(ch.Scopes, src.eff) {
			continue
		}
		if ch.RowVersion < 1 || ch.RowVersion > ssp2.MaxSafeInt || codec.Validate(ch.Row) != nil {
			return segstore.Built{}, nil, false
		}
		ups = append(ups, ch)
	}
	slices.SortFunc(ups, func(a, b *storage.ChangeRecord) int { return t.CompareRowIDs(a.RowID, b.RowID) })
	n := len(ups)
	for _, id := range idx.ids {
		if last[id] == nil {
			n++
		}
	}
	if n >= src.pageRows {
		return segstore.Built{}, nil, false
	}
	sb := ssp2.NewSegmentBuilder(t.Name, schemaVersion, t.Columns)
	size := 0
	for _, r := range idx.rows {
		size += len(r.Row) + 8
	}
	for _, ch := range ups {
		size += len(ch.Row) + 8
	}
	sb.Grow(size + size/16 + 64)
	// The new page's index: its rows' ids, versions and keys, and where
	// each row's bytes end (spans are cut once the bytes are final).
	nidx := &pageIndex{ids: make([]string, 0, n), rows: make([]ssp2.SegmentRowSpan, 0, n)}
	ends := make([]int, 0, n)
	add := func(id string, version int64, key any, row []byte) {
		sb.AddEncodedRow(version, row)
		nidx.ids = append(nidx.ids, id)
		nidx.rows = append(nidx.rows, ssp2.SegmentRowSpan{ServerVersion: version, Key: key, Row: row})
		ends = append(ends, sb.Len())
	}
	i, j := 0, 0
	for i < len(idx.ids) || j < len(ups) {
		if i < len(idx.ids) && last[idx.ids[i]] != nil {
			i++ // changed since: its last change decides (ups, or gone)
			continue
		}
		if j == len(ups) || (i < len(idx.ids) && t.CompareRowIDs(idx.ids[i], ups[j].RowID) < 0) {
			r := &idx.rows[i]
			add(idx.ids[i], r.ServerVersion, r.Key, r.Row)
			i++
			continue
		}
		key, ok := t.KeyOf(ups[j].RowID)
		if !ok {
			return segstore.Built{}, nil, false
		}
		add(ups[j].RowID, ups[j].RowVersion, key, ups[j].Row)
		j++
	}
	data := sb.Finish()
	if data == nil {
		return segstore.Built{}, nil, false
	}
	for k, end := range ends {
		nidx.rows[k].Row = data[end-len(nidx.rows[k].Row) : end : end]
	}
	m := segstore.Meta{MediaType: ssp2.MediaRows, Table: t.Name, ScopeDigest: src.digest, AsOfCommitSeq: pin, RowCount: int64(n)}
	return segstore.Built{Meta: m, Data: data}, nidx, true
}
