package sqlite

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/sqlite/internal/rawread"
)

// CopyRowsToImage implements storage.ImageCopier: a C-API connection opens
// the image file, attaches this store's database read-only, and one
// INSERT ... SELECT (ScanRows' statement) copies the rows inside SQLite.
// Text-typed columns are cast to TEXT (a BLOB there reads as the string
// VisitRows hands out); afterwards one scan of the image checks every
// value's storage class against its column as decodeValue does, so a
// stored value that does not fit fails the copy. ctx's end interrupts it.
func (s *Store) CopyRowsToImage(ctx context.Context, partition string, q storage.RowQuery, imagePath string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("sqlite: copy rows to image: %w", err)
	}
	_, tables, _, err := s.current()
	if err != nil {
		return 0, fmt.Errorf("sqlite: copy rows to image: %w", err)
	}
	ts := tables[q.Table.Name]
	if ts == nil {
		return 0, fmt.Errorf("sqlite: copy rows to image: table %q is not in the ensured schema", q.Table.Name)
	}
	t := ts.t
	cols := make([]string, 0, len(t.Columns)+1)
	for _, c := range t.Columns {
		switch c.Type {
		case ssp2.TypeString, ssp2.TypeJSON, ssp2.TypeBlobRef:
			cols = append(cols, "CAST("+quote(c.Name)+" AS TEXT)")
		default:
			cols = append(cols, quote(c.Name))
		}
	}
	cols = append(cols, "_sync_version")
	sel, args, none, err := rowsQueryFrom(ts, "src.", strings.Join(cols, ", "), partition, q)
	if err != nil || none {
		return 0, err
	}
	c, err := rawread.OpenImageWriter(imagePath, s.path, s.raw.busy)
	if err != nil {
		return 0, fmt.Errorf("sqlite: copy rows to image: %w", err)
	}
	defer c.Close()
	interrupted := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { c.Interrupt(); close(interrupted) })
	defer func() {
		if !stop() {
			<-interrupted // never close c under a running Interrupt
		}
	}()
	run := func(query string, args ...any) (*rawread.Stmt, bool, error) {
		st, err := c.Prepare(query)
		if err != nil {
			return nil, false, err
		}
		if err := st.Bind(args...); err != nil {
			return nil, false, err
		}
		row, err := st.Step()
		if err != nil && errors.Is(err, rawread.ErrInterrupted) && ctx.Err() != nil {
			err = ctx.Err()
		}
		return st, row, err
	}
	st, _, err := run("INSERT INTO main."+quote(t.Name)+" "+sel, args...)
	if err != nil {
		return 0, fmt.Errorf("sqlite: copy rows of %s to image: %w", t.Name, err)
	}
	st.Reset()
	n := c.Changes()
	if bad := imageClassCheck(t); bad != "" {
		st, row, err := run("SELECT " + bad + " FROM main." + quote(t.Name) + " WHERE " + bad + " IS NOT NULL LIMIT 1")
		if err != nil {
			return 0, fmt.Errorf("sqlite: copy rows of %s to image: check: %w", t.Name, err)
		}
		if row {
			col := string(st.Bytes(0))
			st.Reset()
			return 0, fmt.Errorf("sqlite: copy rows of %s to image: column %s: a stored value does not fit its type", t.Name, col)
		}
		st.Reset()
	}
	return n, nil
}

// imageClassCheck is an SQL expression over an image row naming the first
// column whose storage class decodeValue would refuse (NULL when none).
func imageClassCheck(t *schema.Table) string {
	var b strings.Builder
	for _, c := range t.Columns {
		var ok string
		switch c.Type {
		case ssp2.TypeInteger, ssp2.TypeBoolean:
			ok = "'integer'"
		case ssp2.TypeFloat:
			ok = "'real', 'integer'"
		case ssp2.TypeBytes, ssp2.TypeCRDT:
			ok = "'blob'"
		default:
			continue // cast to TEXT on the way in
		}
		fmt.Fprintf(&b, " WHEN typeof(%s) NOT IN ('null', %s) THEN '%s'", quote(c.Name), ok, strings.ReplaceAll(c.Name, "'", "''"))
	}
	if b.Len() == 0 {
		return ""
	}
	return "(CASE" + b.String() + " END)"
}
