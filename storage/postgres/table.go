package postgres

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
)

// tableSQL holds the statements on one synced table's row table.
type tableSQL struct {
	t          *schema.Table
	ident      string   // schema-qualified quoted table name
	regclass   string   // the same, as text for to_regclass
	cols       []string // quoted column names in schema order
	selectList string   // cols..., _sync_version
	get        string   // $1 partition, $2 row id
	upsert     string   // $1 partition, $2.. values, $n+2 version
	del        string   // $1 partition, $2 row id
}

// pgType maps a row-codec type to its PostgreSQL column type. json is text
// (not jsonb) so the raw text is kept byte for byte.
func pgType(t ssp2.ColumnType) string {
	switch t {
	case ssp2.TypeInteger:
		return "bigint"
	case ssp2.TypeFloat:
		return "double precision"
	case ssp2.TypeBoolean:
		return "boolean"
	case ssp2.TypeBytes, ssp2.TypeCRDT:
		return "bytea"
	default: // string, json, blob_ref
		return "text"
	}
}

// zeroLiteral is the value existing rows get when a migration adds a NOT
// NULL column to a table that already holds rows.
func zeroLiteral(t ssp2.ColumnType) string {
	switch t {
	case ssp2.TypeInteger, ssp2.TypeFloat:
		return "0"
	case ssp2.TypeBoolean:
		return "false"
	case ssp2.TypeBytes, ssp2.TypeCRDT:
		return `'\x'::bytea`
	case ssp2.TypeJSON:
		return `'null'`
	default:
		return `''`
	}
}

func newTableSQL(schemaName string, t *schema.Table) *tableSQL {
	ts := &tableSQL{t: t, ident: qualify(schemaName, t.Name)}
	ts.regclass = ts.ident
	for _, c := range t.Columns {
		ts.cols = append(ts.cols, pgx.Identifier{c.Name}.Sanitize())
	}
	pk := ts.cols[t.PK]
	ts.selectList = strings.Join(ts.cols, ", ") + ", _sync_version"
	ts.get = fmt.Sprintf(`SELECT %s FROM %s WHERE partition_id = $1 AND %s = $2`, ts.selectList, ts.ident, pk)
	ts.del = fmt.Sprintf(`DELETE FROM %s WHERE partition_id = $1 AND %s = $2`, ts.ident, pk)

	var vals, sets []string
	vals = append(vals, "$1")
	for i, c := range ts.cols {
		vals = append(vals, fmt.Sprintf("$%d", i+2))
		if i != t.PK {
			sets = append(sets, fmt.Sprintf("%s = EXCLUDED.%s", c, c))
		}
	}
	vals = append(vals, fmt.Sprintf("$%d", len(ts.cols)+2))
	sets = append(sets, "_sync_version = EXCLUDED._sync_version")
	ts.upsert = fmt.Sprintf(`INSERT INTO %s (partition_id, %s, _sync_version) VALUES (%s)
ON CONFLICT (partition_id, %s) DO UPDATE SET %s`,
		ts.ident, strings.Join(ts.cols, ", "), strings.Join(vals, ", "), pk, strings.Join(sets, ", "))
	return ts
}

// columnDef is the DDL of column i in CREATE TABLE.
func (ts *tableSQL) columnDef(i int) string {
	c := ts.t.Columns[i]
	def := ts.cols[i] + " " + pgType(c.Type)
	if i == ts.t.PK {
		def += ` COLLATE "C"`
	}
	if !c.Nullable {
		def += " NOT NULL"
	}
	return def
}

// createTable is the CREATE TABLE statement of a table that does not exist.
func (ts *tableSQL) createTable() string {
	defs := []string{`partition_id text COLLATE "C" NOT NULL`}
	for i := range ts.cols {
		defs = append(defs, ts.columnDef(i))
	}
	defs = append(defs, "_sync_version bigint NOT NULL",
		fmt.Sprintf("PRIMARY KEY (partition_id, %s)", ts.cols[ts.t.PK]))
	return fmt.Sprintf("CREATE TABLE %s (\n\t%s\n)", ts.ident, strings.Join(defs, ",\n\t"))
}

// addColumn returns the statements adding column i to an existing table.
// A NOT NULL column is filled with its type's zero value in existing rows.
func (ts *tableSQL) addColumn(i int) []string {
	c := ts.t.Columns[i]
	if c.Nullable {
		return []string{fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s", ts.ident, ts.columnDef(i))}
	}
	return []string{
		fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s DEFAULT %s", ts.ident, ts.columnDef(i), zeroLiteral(c.Type)),
		fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s DROP DEFAULT", ts.ident, ts.cols[i]),
	}
}

// indexName derives a schema-unique index name of at most 63 bytes.
func indexName(table, kind, name string) string {
	n := table + "__" + kind + "_" + name
	if len(n) <= 63 {
		return n
	}
	sum := sha256.Sum256([]byte(n))
	return n[:50] + "_" + hex.EncodeToString(sum[:6])
}

// wantedIndexes returns index name -> CREATE INDEX statement for the
// table's declared indexes (on (partition_id, cols...)) and one index per
// scope column (on (partition_id, col, pk)) for scoped bootstrap scans.
func (ts *tableSQL) wantedIndexes() map[string]string {
	out := map[string]string{}
	for _, ix := range ts.t.Indexes {
		name := indexName(ts.t.Name, "i", ix.Name)
		cols := []string{"partition_id"}
		for _, c := range ix.Columns {
			cols = append(cols, ts.cols[c])
		}
		unique := ""
		if ix.Unique {
			unique = "UNIQUE "
		}
		out[name] = fmt.Sprintf("CREATE %sINDEX %s ON %s (%s)", unique,
			pgx.Identifier{name}.Sanitize(), ts.ident, strings.Join(cols, ", "))
	}
	seen := map[int]bool{}
	for _, sv := range ts.t.Scopes {
		if seen[sv.Column] || sv.Column == ts.t.PK {
			continue
		}
		seen[sv.Column] = true
		name := indexName(ts.t.Name, "s", ts.t.Columns[sv.Column].Name)
		out[name] = fmt.Sprintf("CREATE INDEX %s ON %s (partition_id, %s, %s)",
			pgx.Identifier{name}.Sanitize(), ts.ident, ts.cols[sv.Column], ts.cols[ts.t.PK])
	}
	return out
}
