package httpsync

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
)

// ImageToSegment converts a downloaded SQLite segment image (SPEC §5.3) of
// a table of sch into the equivalent SSG2 rows segment, so a client applies
// both media one way. It checks the image's _syncular_segment row against
// the reference (table, pin, scope digest, row count).
func ImageToSegment(ctx context.Context, sch *schema.Schema, ref *ssp2.SegmentRef, image []byte) ([]byte, error) {
	t := sch.Table(ref.Table)
	if t == nil {
		return nil, fmt.Errorf("httpsync: image of unknown table %q", ref.Table)
	}
	dir, err := os.MkdirTemp("", "synclane-client-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "image.db")
	if err := os.WriteFile(path, image, 0o600); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var format int
	var table, digest string
	var sv int32
	var asOf, count int64
	if err := db.QueryRowContext(ctx, `SELECT format, "table", schemaVersion, asOfCommitSeq, scopeDigest, rowCount FROM _syncular_segment`).
		Scan(&format, &table, &sv, &asOf, &digest, &count); err != nil {
		return nil, fmt.Errorf("httpsync: image metadata: %w", err)
	}
	if format != 1 || table != ref.Table || asOf != ref.AsOfCommitSeq || digest != ref.ScopeDigest || count != ref.RowCount {
		return nil, fmt.Errorf("httpsync: image metadata (%d %q %d %q %d) does not match its reference", format, table, asOf, digest, count)
	}
	names := make([]string, 0, len(t.Columns)+1)
	for _, c := range t.Columns {
		names = append(names, `"`+strings.ReplaceAll(c.Name, `"`, `""`)+`"`)
	}
	names = append(names, "_syncular_version")
	rows, err := db.QueryContext(ctx, "SELECT "+strings.Join(names, ", ")+` FROM "`+strings.ReplaceAll(t.Name, `"`, `""`)+`"`)
	if err != nil {
		return nil, fmt.Errorf("httpsync: image rows: %w", err)
	}
	defer rows.Close()
	sb := ssp2.NewSegmentBuilder(t.Name, sv, t.Columns)
	dest := make([]any, len(t.Columns)+1)
	for {
		if !rows.Next() {
			break
		}
		vals := make([]any, len(dest))
		for i := range dest {
			dest[i] = &vals[i]
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("httpsync: image row: %w", err)
		}
		row := make(ssp2.Row, len(t.Columns))
		for i, c := range t.Columns {
			row[i] = imageValue(c.Type, vals[i])
		}
		version, _ := vals[len(t.Columns)].(int64)
		if err := sb.AddRow(version, row); err != nil {
			return nil, fmt.Errorf("httpsync: image row: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("httpsync: image rows: %w", err)
	}
	if int64(sb.Rows()) != count {
		return nil, fmt.Errorf("httpsync: image holds %d rows, its metadata says %d", sb.Rows(), count)
	}
	return sb.Finish(), nil
}

// imageValue converts a SQLite value to the row codec's Go type.
func imageValue(ct ssp2.ColumnType, v any) any {
	if v == nil {
		return nil
	}
	switch ct {
	case ssp2.TypeBoolean:
		n, _ := v.(int64)
		return n != 0
	case ssp2.TypeJSON:
		switch x := v.(type) {
		case string:
			return json.RawMessage(x)
		case []byte:
			return json.RawMessage(x)
		}
	case ssp2.TypeString, ssp2.TypeBlobRef:
		if b, ok := v.([]byte); ok {
			return string(b)
		}
	case ssp2.TypeBytes, ssp2.TypeCRDT:
		if s, ok := v.(string); ok {
			return []byte(s)
		}
	}
	return v
}
