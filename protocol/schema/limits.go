package schema

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"

	"github.com/synclane/synclane/protocol/ssp2"
)

// Shape limits every compiled schema honours. They are what both storage
// backends can hold in one setup transaction (PostgreSQL: 1,600 columns
// per table, 32 columns per index, identifiers of 63 bytes, and a shared
// lock table sized by max_locks_per_transaction; SQLite: 2,000 columns),
// less the columns the backends add (partition_id and _sync_version on
// every row table, partition_id first in every index). A schema beyond
// them is refused by Compile, before any storage is touched, instead of
// failing half-way through storage setup.
const (
	// MaxTables is the number of tables one schema may declare.
	MaxTables = 1000
	// MaxColumns is the number of columns one table may declare.
	MaxColumns = 1000
	// MaxIndexes is the number of secondary indexes one table may declare.
	MaxIndexes = 32
	// MaxIndexColumns is the number of columns one index may list
	// (PostgreSQL's 32 less the partition_id column every index leads with).
	MaxIndexColumns = 31
	// MaxSchemaIndexes is the number of secondary indexes (declared ones
	// and the per-scope-column ones PostgreSQL adds) one schema may need.
	MaxSchemaIndexes = 2000
	// MaxIdentBytes is the length of a table, column or index name
	// (PostgreSQL's NAMEDATALEN less one). Derived index names are kept
	// within it too (see IndexIdent).
	MaxIdentBytes = 63
)

// DefaultCRDTType is the crdtType Compile accepts without Options: the
// yjs-doc merge (protocol/yjs), the only one synclane serve registers.
const DefaultCRDTType = "yjs-doc"

// Options adjusts what CompileWith accepts.
type Options struct {
	// CRDTTypes lists crdtTypes accepted besides DefaultCRDTType (for
	// hosts that register their own partition.Merger). A crdt column
	// naming any other crdtType is refused.
	CRDTTypes []string
}

// reservedTablePrefixes are the table-name prefixes (compared in lower
// case) the backends and the databases themselves use: the system tables
// (sync_*, synclane_* such as the PostgreSQL segment store's
// synclane_segments), the row tables' own columns (_sync_version) and the
// databases' catalogs.
var reservedTablePrefixes = []string{"sync_", "synclane_", "_sync", "sqlite_", "pg_"}

// Index kinds of IndexIdent.
const (
	// KindIndex is a declared secondary index.
	KindIndex = 'i'
	// KindScope is the per-scope-column index PostgreSQL adds.
	KindScope = 's'
	// KindReference is the index of a reference column (SPEC §6.11).
	KindReference = 'r'
)

// IndexIdent is the database-wide storage name of an index of table: a
// declared index (kind KindIndex, name its index name) or a scope column's
// index (KindScope, name the column). It is "<len(table)>_<table>_<kind>_<name>",
// which no two (table, kind, name) triples share and which starts with a
// digit, so it never equals a table name (those start with a letter or
// "_") nor PostgreSQL's "<table>_pkey". One longer than MaxIdentBytes is cut
// to 46 bytes followed by "_" and 16 hex digits of the SHA-256 of the
// whole name; CompileWith refuses a schema in which two storage names are
// equal ignoring case, so a hash collision can never merge two indexes.
func IndexIdent(table string, kind byte, name string) string {
	n := strconv.Itoa(len(table)) + "_" + table + "_" + string(kind) + "_" + name
	if len(n) <= MaxIdentBytes {
		return n
	}
	sum := sha256.Sum256([]byte(n))
	return n[:46] + "_" + hex.EncodeToString(sum[:8])
}

// IndexIdent is the storage name of ix (see the package function).
func (t *Table) IndexIdent(ix Index) string { return IndexIdent(t.Name, KindIndex, ix.Name) }

// ScopeIndexIdent is the storage name of the index of scope column i.
func (t *Table) ScopeIndexIdent(i int) string {
	return IndexIdent(t.Name, KindScope, t.Columns[i].Name)
}

// derivedIdents lists (storage name, what it names) of every index a
// backend may create for t.
func (t *Table) derivedIdents() [][2]string {
	var out [][2]string
	for _, ix := range t.Indexes {
		out = append(out, [2]string{t.IndexIdent(ix), ix.Name})
	}
	seen := map[int]bool{}
	for _, sv := range t.Scopes {
		if !seen[sv.Column] {
			seen[sv.Column] = true
			out = append(out, [2]string{t.ScopeIndexIdent(sv.Column), "scope column " + t.Columns[sv.Column].Name})
		}
	}
	for _, r := range t.References {
		out = append(out, [2]string{t.ReferenceIndexIdent(r.Column), "reference column " + t.Columns[r.Column].Name})
	}
	return out
}

// canonical is the compiled form Fingerprint hashes: everything that
// shapes storage, the wire or the merge of a table, in declaration order.
// DeclaredType is left out (informational only).
type canonical struct {
	Version int32            `json:"version"`
	Tables  []canonicalTable `json:"tables"`
}

type canonicalTable struct {
	Name    string            `json:"name"`
	Columns []canonicalColumn `json:"columns"`
	PK      string            `json:"primaryKey"`
	Scopes  []canonicalScope  `json:"scopes"`
	Indexes []canonicalIndex  `json:"indexes"`
	// References is left out when there are none, so a schema without
	// references keeps the fingerprint it had before they existed.
	References []canonicalRef `json:"references,omitempty"`
}

type canonicalRef struct {
	Column   string `json:"column"`
	Parent   string `json:"parentTable"`
	OnDelete string `json:"onDelete"`
}

type canonicalColumn struct {
	Name      string `json:"name"`
	Type      uint8  `json:"type"`
	Nullable  bool   `json:"nullable"`
	CrdtType  string `json:"crdtType"`
	Encrypted bool   `json:"encrypted"`
}

type canonicalScope struct {
	Prefix string `json:"prefix"`
	Var    string `json:"var"`
	Column string `json:"column"`
}

type canonicalIndex struct {
	Name    string   `json:"name"`
	Columns []string `json:"columns"`
	Unique  bool     `json:"unique"`
}

// Canonical returns the canonical JSON of the compiled schema: equal for
// two schemas exactly when they declare the same version and the same
// tables, columns (name, type, nullability, crdtType, encryption), primary
// keys, scopes and indexes in the same order, however the source spelled
// them (white space, key order, "id" or ["id"], a scope's string or object
// form). DeclaredType does not count.
func (s *Schema) Canonical() []byte {
	c := canonical{Version: s.Version, Tables: make([]canonicalTable, 0, len(s.Tables))}
	for _, t := range s.Tables {
		ct := canonicalTable{Name: t.Name, PK: t.Columns[t.PK].Name, Columns: []canonicalColumn{}, Scopes: []canonicalScope{}, Indexes: []canonicalIndex{}}
		for i, col := range t.Columns {
			ct.Columns = append(ct.Columns, canonicalColumn{Name: col.Name, Type: uint8(col.Type), Nullable: col.Nullable, CrdtType: t.Meta[i].CrdtType, Encrypted: t.Meta[i].Encrypted})
		}
		for _, sv := range t.Scopes {
			ct.Scopes = append(ct.Scopes, canonicalScope{Prefix: sv.Prefix, Var: sv.Var, Column: t.Columns[sv.Column].Name})
		}
		for _, ix := range t.Indexes {
			ci := canonicalIndex{Name: ix.Name, Unique: ix.Unique, Columns: []string{}}
			for _, c := range ix.Columns {
				ci.Columns = append(ci.Columns, t.Columns[c].Name)
			}
			ct.Indexes = append(ct.Indexes, ci)
		}
		for _, r := range t.References {
			ct.References = append(ct.References, canonicalRef{Column: t.Columns[r.Column].Name, Parent: r.Parent.Name, OnDelete: string(r.OnDelete)})
		}
		c.Tables = append(c.Tables, ct)
	}
	b, err := json.Marshal(c)
	if err != nil { // plain strings, ints and bools: cannot fail
		panic("schema: canonical form: " + err.Error())
	}
	return b
}

// Fingerprint is "sha256:" and the hex SHA-256 of Canonical. The backends
// store it next to the schema version and refuse a different schema at
// the same version (storage.ErrSchemaChanged).
func (s *Schema) Fingerprint() string {
	sum := sha256.Sum256(s.Canonical())
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Source returns a Source that compiles to s again (with the crdtTypes s
// uses): the canonical spelling of its tables, DeclaredType included.
func (s *Schema) Source() Source {
	src := Source{Version: s.Version}
	for _, t := range s.Tables {
		ts := TableSource{Name: t.Name}
		for i, c := range t.Columns {
			ts.Columns = append(ts.Columns, ColumnSource{Name: c.Name, Type: typeName(c.Type), Nullable: c.Nullable,
				CrdtType: t.Meta[i].CrdtType, Encrypted: t.Meta[i].Encrypted, DeclaredType: t.Meta[i].DeclaredType})
		}
		ts.PrimaryKey, _ = json.Marshal(t.Columns[t.PK].Name)
		for _, sv := range t.Scopes {
			raw, _ := json.Marshal(map[string]string{"pattern": sv.Prefix + ":{" + sv.Var + "}", "column": t.Columns[sv.Column].Name})
			ts.Scopes = append(ts.Scopes, raw)
		}
		for _, ix := range t.Indexes {
			is := IndexSource{Name: ix.Name, Unique: ix.Unique}
			for _, c := range ix.Columns {
				is.Columns = append(is.Columns, t.Columns[c].Name)
			}
			ts.Indexes = append(ts.Indexes, is)
		}
		for _, r := range t.References {
			ts.References = append(ts.References, ReferenceSource{Column: t.Columns[r.Column].Name, ParentTable: r.Parent.Name, OnDelete: string(r.OnDelete)})
		}
		src.Tables = append(src.Tables, ts)
	}
	return src
}

// CRDTTypes lists the crdtTypes s names, for CompileWith's Options.
func (s *Schema) CRDTTypes() []string {
	var out []string
	for _, t := range s.Tables {
		for _, m := range t.Meta {
			if m.CrdtType != "" && m.CrdtType != DefaultCRDTType {
				out = append(out, m.CrdtType)
			}
		}
	}
	return out
}

func typeName(t ssp2.ColumnType) string {
	for n, v := range TypeByName {
		if v == t {
			return n
		}
	}
	return ""
}
