// Package sqliteimage builds SQLite segment images (SPEC §5.3): a table's
// in-scope rows at a pin as one SQLite database file. It links the SQLite
// driver; the partition takes it as a partition.ImageBuilder (Builder), so
// a server without one links no driver and serves no images.
package sqliteimage

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/segstore"
)

// imageChunk is how many rows an image build reads per scan.
const imageChunk = 5000

// imageBatch is how many rows one INSERT of an image build writes at most;
// wide tables take fewer, so a statement never binds more than
// sqliteMaxParams values.
const (
	imageBatch      = 100
	sqliteMaxParams = 32766 // SQLite's default SQLITE_MAX_VARIABLE_NUMBER
)

// Build builds a SQLite segment image (SPEC §5.3) of table t: exactly two
// tables, the data table (the IR columns with their affinities, NOT NULL
// and PRIMARY KEY from the IR, then _syncular_version INTEGER NOT NULL)
// holding every row scan returns, and _syncular_segment with one row
// describing the image. It returns the database file's bytes and the row
// count. Tables with encrypted columns must never be imaged; it refuses them.
func Build(ctx context.Context, t *schema.Table, schemaVersion int32, asOf int64, scopeDigest string, scan segstore.ImageScan) ([]byte, int64, error) {
	return buildImage(ctx, t, func(db *sql.DB, _ string) (int64, error) {
		return fillImage(ctx, db, t, schemaVersion, asOf, scopeDigest, scan)
	})
}

// BuildCopy is Build with the rows written by copyRows (a store that
// copies them into the file itself, e.g. with one INSERT ... SELECT)
// instead of read through a scan and inserted here. The image is
// the same: the same tables, rows and metadata.
func BuildCopy(ctx context.Context, t *schema.Table, schemaVersion int32, asOf int64, scopeDigest string, copyRows segstore.ImageCopy) ([]byte, int64, error) {
	return buildImage(ctx, t, func(db *sql.DB, path string) (int64, error) {
		if err := createImageTables(ctx, db, t); err != nil {
			return 0, err
		}
		n, err := copyRows(ctx, path)
		if err != nil {
			return 0, err
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO _syncular_segment VALUES (1, ?, ?, ?, ?, ?)`, t.Name, schemaVersion, asOf, scopeDigest, n); err != nil {
			return 0, fmt.Errorf("segstore: image metadata: %w", err)
		}
		return n, nil
	})
}

// buildImage creates a temporary image file, fills it with fill and
// returns its bytes and fill's row count.
func buildImage(ctx context.Context, t *schema.Table, fill func(db *sql.DB, path string) (int64, error)) ([]byte, int64, error) {
	for _, m := range t.Meta {
		if m.Encrypted {
			return nil, 0, fmt.Errorf("segstore: table %q has encrypted columns and is never imaged", t.Name)
		}
	}
	dir, err := os.MkdirTemp("", "synclane-image-")
	if err != nil {
		return nil, 0, fmt.Errorf("segstore: image temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "image.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_journal_mode=OFF&_synchronous=OFF")
	if err != nil {
		return nil, 0, fmt.Errorf("segstore: image open: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	n, err := fill(db, path)
	if err != nil {
		return nil, 0, err
	}
	if err := db.Close(); err != nil {
		return nil, 0, fmt.Errorf("segstore: image close: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, fmt.Errorf("segstore: image read: %w", err)
	}
	return data, n, nil
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func affinity(ct ssp2.ColumnType) string {
	switch ct {
	case ssp2.TypeInteger, ssp2.TypeBoolean:
		return "INTEGER"
	case ssp2.TypeFloat:
		return "REAL"
	case ssp2.TypeBytes, ssp2.TypeCRDT:
		return "BLOB"
	default: // string, json, blob_ref
		return "TEXT"
	}
}

// createImageTables creates the image's data table and _syncular_segment.
func createImageTables(ctx context.Context, db *sql.DB, t *schema.Table) error {
	var cols []string
	for i, c := range t.Columns {
		d := quoteIdent(c.Name) + " " + affinity(c.Type)
		if !c.Nullable || i == t.PK {
			d += " NOT NULL"
		}
		if i == t.PK {
			d += " PRIMARY KEY"
		}
		cols = append(cols, d)
	}
	cols = append(cols, "_syncular_version INTEGER NOT NULL")
	ddl := "CREATE TABLE " + quoteIdent(t.Name) + " (" + strings.Join(cols, ", ") + ");" +
		`CREATE TABLE _syncular_segment (format INTEGER NOT NULL, "table" TEXT NOT NULL, schemaVersion INTEGER NOT NULL, asOfCommitSeq INTEGER NOT NULL, scopeDigest TEXT NOT NULL, rowCount INTEGER NOT NULL);`
	if _, err := db.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("segstore: image schema: %w", err)
	}
	return nil
}

func fillImage(ctx context.Context, db *sql.DB, t *schema.Table, schemaVersion int32, asOf int64, scopeDigest string, scan segstore.ImageScan) (int64, error) {
	if err := createImageTables(ctx, db, t); err != nil {
		return 0, err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("segstore: image begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	// Rows go in imageBatch at a time, one multi-row INSERT each: the
	// per-statement cost (bind, step, reset through database/sql) was two
	// thirds of a one-row-per-statement build.
	width := len(t.Columns) + 1
	insert := func(rows int) (*sql.Stmt, error) {
		one := "(" + strings.TrimSuffix(strings.Repeat("?,", width), ",") + ")"
		return tx.PrepareContext(ctx, "INSERT INTO "+quoteIdent(t.Name)+" VALUES "+strings.TrimSuffix(strings.Repeat(one+",", rows), ","))
	}
	perStmt := max(1, min(imageBatch, sqliteMaxParams/width))
	batch, err := insert(perStmt)
	if err != nil {
		return 0, fmt.Errorf("segstore: image prepare: %w", err)
	}
	defer batch.Close()
	var n int64
	var after *string
	args := make([]any, 0, width*perStmt)
	flush := func(st *sql.Stmt) error {
		if _, err := st.ExecContext(ctx, args...); err != nil {
			return fmt.Errorf("segstore: image insert: %w", err)
		}
		clear(args)
		args = args[:0]
		return nil
	}
	for {
		rows, err := scan(ctx, after, imageChunk)
		if err != nil {
			return 0, err
		}
		for i := range rows {
			for _, v := range rows[i].Values {
				switch x := v.(type) {
				case bool:
					if x {
						v = int64(1)
					} else {
						v = int64(0)
					}
				case json.RawMessage:
					v = string(x)
				}
				args = append(args, v)
			}
			args = append(args, rows[i].Version)
			n++
			if len(args) == cap(args) {
				if err := flush(batch); err != nil {
					return 0, err
				}
			}
		}
		if len(rows) < imageChunk {
			break
		}
		last := rows[len(rows)-1].RowID
		after = &last
	}
	if len(args) > 0 { // the last, shorter batch
		rest, err := insert(len(args) / width)
		if err != nil {
			return 0, fmt.Errorf("segstore: image prepare: %w", err)
		}
		err = flush(rest)
		_ = rest.Close()
		if err != nil {
			return 0, err
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO _syncular_segment VALUES (1, ?, ?, ?, ?, ?)`, t.Name, schemaVersion, asOf, scopeDigest, n); err != nil {
		return 0, fmt.Errorf("segstore: image metadata: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("segstore: image commit: %w", err)
	}
	return n, nil
}

// Builder builds images with Build and BuildCopy; its zero value is
// ready. It is the partition.ImageBuilder of this module: set it as
// engine.Config.Images to serve SQLite images.
type Builder struct{}

// Build calls Build.
func (Builder) Build(ctx context.Context, t *schema.Table, schemaVersion int32, asOf int64, scopeDigest string, scan segstore.ImageScan) ([]byte, int64, error) {
	return Build(ctx, t, schemaVersion, asOf, scopeDigest, scan)
}

// BuildCopy calls BuildCopy.
func (Builder) BuildCopy(ctx context.Context, t *schema.Table, schemaVersion int32, asOf int64, scopeDigest string, copyRows segstore.ImageCopy) ([]byte, int64, error) {
	return BuildCopy(ctx, t, schemaVersion, asOf, scopeDigest, copyRows)
}
