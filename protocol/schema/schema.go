// Package schema compiles a synclane server schema (the reference
// ServerSchema as JSON) into the validated, indexed form the engine, the
// storage backends and the row codec use.
//
// A compiled *Schema is immutable and safe for concurrent use.
package schema

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/synclane/synclane/protocol/ssp2"
)

// Source is the JSON form of a schema, as written by hosts.
type Source struct {
	Version int32         `json:"version"`
	Tables  []TableSource `json:"tables"`
}

// TableSource is the JSON form of one synced table.
type TableSource struct {
	Name       string            `json:"name"`
	Columns    []ColumnSource    `json:"columns"`
	PrimaryKey json.RawMessage   `json:"primaryKey"` // "col" or ["col"]
	Scopes     []json.RawMessage `json:"scopes"`     // "prefix:{var}" or {"pattern","column"}
	Indexes    []IndexSource     `json:"indexes"`
}

// ColumnSource is the JSON form of a column. CrdtType, Encrypted and
// DeclaredType are IR-only metadata: they never go on the wire.
type ColumnSource struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable bool   `json:"nullable"`
	// CrdtType names the merge of a crdt column (e.g. "yjs-doc"): every
	// crdt column must set it (SPEC §5.10.1) and no other column may.
	CrdtType string `json:"crdtType,omitempty"`
	// Encrypted marks a column whose values are client-side ciphertext
	// (opaque to the server); never the primary key, a scope or a crdt column.
	Encrypted bool `json:"encrypted,omitempty"`
	// DeclaredType is the host's own type name for the column (for code
	// generators); informational.
	DeclaredType string `json:"declaredType,omitempty"`
}

// ColumnMeta is a column's IR-only metadata (see ColumnSource).
type ColumnMeta struct {
	CrdtType     string
	Encrypted    bool
	DeclaredType string
}

// IndexSource is the JSON form of a secondary index.
type IndexSource struct {
	Name    string   `json:"name"`
	Columns []string `json:"columns"`
	Unique  bool     `json:"unique"`
}

// Schema is a compiled, validated schema.
type Schema struct {
	Version int32
	Tables  []*Table // declaration order (bootstrap order: parents first)
	byName  map[string]*Table
	vars    map[string]bool // every scope var declared by any table
}

// Table is a compiled table.
type Table struct {
	Name    string
	Columns []ssp2.Column
	// PK is the index in Columns of the primary-key column (a non-null
	// string column whose value is the wire rowId).
	PK      int
	Scopes  []ScopeVar
	Indexes []Index
	// Meta holds each column's IR-only metadata, parallel to Columns.
	Meta    []ColumnMeta
	colIdx  map[string]int
	scopeOf map[string]*ScopeVar
}

// ScopeVar is one declared scope pattern "prefix:{var}" bound to a column.
type ScopeVar struct {
	Prefix string
	Var    string
	Column int // index into Table.Columns
}

// Key returns the scope key of value under v: "prefix:value", the unit
// realtime registrations, wake-ups and presence are addressed by.
func (v *ScopeVar) Key(value string) string { return v.Prefix + ":" + value }

// Index is a compiled secondary index.
type Index struct {
	Name    string
	Columns []int
	Unique  bool
}

var (
	identRe   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)
	patternRe = regexp.MustCompile(`^([A-Za-z0-9_.-]+):\{([A-Za-z_][A-Za-z0-9_]*)\}$`)
)

// TypeByName maps schema type names to row-codec tags.
var TypeByName = map[string]ssp2.ColumnType{
	"string": ssp2.TypeString, "integer": ssp2.TypeInteger, "float": ssp2.TypeFloat,
	"boolean": ssp2.TypeBoolean, "json": ssp2.TypeJSON, "bytes": ssp2.TypeBytes,
	"blob_ref": ssp2.TypeBlobRef, "crdt": ssp2.TypeCRDT,
}

// Parse decodes JSON schema text and compiles it.
func Parse(data []byte) (*Schema, error) {
	var src Source
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&src); err != nil {
		return nil, fmt.Errorf("schema: parse: %w", err)
	}
	return Compile(src)
}

// Compile validates src and returns the compiled schema. Errors name the
// table and field at fault.
func Compile(src Source) (*Schema, error) {
	if src.Version < 1 {
		return nil, fmt.Errorf("schema: version must be >= 1, got %d", src.Version)
	}
	if len(src.Tables) == 0 {
		return nil, fmt.Errorf("schema: at least one table is required")
	}
	s := &Schema{Version: src.Version, byName: map[string]*Table{}, vars: map[string]bool{}}
	for i, ts := range src.Tables {
		t, err := compileTable(ts)
		if err != nil {
			name := ts.Name
			if name == "" {
				name = fmt.Sprintf("#%d", i)
			}
			return nil, fmt.Errorf("schema: table %q: %w", name, err)
		}
		if _, dup := s.byName[t.Name]; dup {
			return nil, fmt.Errorf("schema: table %q: declared twice", t.Name)
		}
		s.byName[t.Name] = t
		s.Tables = append(s.Tables, t)
		for _, sv := range t.Scopes {
			s.vars[sv.Var] = true
		}
	}
	return s, nil
}

func compileTable(ts TableSource) (*Table, error) {
	if !identRe.MatchString(ts.Name) {
		return nil, fmt.Errorf("name: must match %s", identRe)
	}
	low := strings.ToLower(ts.Name)
	if strings.HasPrefix(low, "sync_") || strings.HasPrefix(low, "_sync") || strings.HasPrefix(low, "sqlite_") || strings.HasPrefix(low, "pg_") {
		return nil, fmt.Errorf("name: prefixes sync_, _sync, sqlite_ and pg_ are reserved")
	}
	if len(ts.Columns) == 0 {
		return nil, fmt.Errorf("columns: at least one column is required")
	}
	if len(ts.Columns) > 1000 {
		return nil, fmt.Errorf("columns: at most 1000 columns")
	}
	t := &Table{Name: ts.Name, colIdx: map[string]int{}, scopeOf: map[string]*ScopeVar{}}
	for i, cs := range ts.Columns {
		if !identRe.MatchString(cs.Name) {
			return nil, fmt.Errorf("columns[%d].name %q: must match %s", i, cs.Name, identRe)
		}
		if strings.HasPrefix(strings.ToLower(cs.Name), "_sync") || strings.EqualFold(cs.Name, "partition_id") {
			return nil, fmt.Errorf("columns[%d].name %q: reserved", i, cs.Name)
		}
		typ, ok := TypeByName[cs.Type]
		if !ok {
			return nil, fmt.Errorf("columns[%d] %q: unknown type %q", i, cs.Name, cs.Type)
		}
		if _, dup := t.colIdx[strings.ToLower(cs.Name)]; dup {
			return nil, fmt.Errorf("columns[%d] %q: declared twice", i, cs.Name)
		}
		if cs.CrdtType != "" && typ != ssp2.TypeCRDT {
			return nil, fmt.Errorf("columns[%d] %q: crdtType is only for crdt columns", i, cs.Name)
		}
		if cs.Encrypted && typ == ssp2.TypeCRDT {
			return nil, fmt.Errorf("columns[%d] %q: a crdt column cannot be encrypted", i, cs.Name)
		}
		if typ == ssp2.TypeCRDT && strings.TrimSpace(cs.CrdtType) == "" {
			return nil, fmt.Errorf("columns[%d] %q: a crdt column needs a crdtType naming its merger (e.g. \"yjs-doc\")", i, cs.Name)
		}
		if len(cs.CrdtType) > 64 || len(cs.DeclaredType) > 256 {
			return nil, fmt.Errorf("columns[%d] %q: crdtType is at most 64 bytes and declaredType at most 256", i, cs.Name)
		}
		t.colIdx[strings.ToLower(cs.Name)] = i
		t.Columns = append(t.Columns, ssp2.Column{Name: cs.Name, Type: typ, Nullable: cs.Nullable})
		t.Meta = append(t.Meta, ColumnMeta{CrdtType: cs.CrdtType, Encrypted: cs.Encrypted, DeclaredType: cs.DeclaredType})
	}
	pk, err := primaryKey(ts.PrimaryKey)
	if err != nil {
		return nil, err
	}
	pki, ok := t.colIdx[strings.ToLower(pk)]
	if !ok {
		return nil, fmt.Errorf("primaryKey %q: no such column", pk)
	}
	if c := t.Columns[pki]; c.Type != ssp2.TypeString || c.Nullable {
		return nil, fmt.Errorf("primaryKey %q: must be a non-nullable string column", pk)
	}
	if t.Meta[pki].Encrypted {
		return nil, fmt.Errorf("primaryKey %q: cannot be encrypted", pk)
	}
	t.PK = pki
	if len(ts.Scopes) == 0 {
		return nil, fmt.Errorf("scopes: every table needs at least one scope pattern")
	}
	for i, raw := range ts.Scopes {
		pattern, column, err := scopeSource(raw)
		if err != nil {
			return nil, fmt.Errorf("scopes[%d]: %w", i, err)
		}
		m := patternRe.FindStringSubmatch(pattern)
		if m == nil {
			return nil, fmt.Errorf("scopes[%d] %q: pattern must look like \"prefix:{var}\"", i, pattern)
		}
		if column == "" {
			column = m[2]
		}
		ci, ok := t.colIdx[strings.ToLower(column)]
		if !ok {
			return nil, fmt.Errorf("scopes[%d] %q: column %q does not exist", i, pattern, column)
		}
		if ct := t.Columns[ci].Type; ct != ssp2.TypeString && ct != ssp2.TypeInteger {
			return nil, fmt.Errorf("scopes[%d] %q: column %q must be string or integer", i, pattern, column)
		}
		if t.Meta[ci].Encrypted {
			return nil, fmt.Errorf("scopes[%d] %q: column %q is encrypted; scope columns cannot be", i, pattern, column)
		}
		if _, dup := t.scopeOf[m[2]]; dup {
			return nil, fmt.Errorf("scopes[%d] %q: variable %q declared twice", i, pattern, m[2])
		}
		t.Scopes = append(t.Scopes, ScopeVar{Prefix: m[1], Var: m[2], Column: ci})
	}
	for i := range t.Scopes {
		t.scopeOf[t.Scopes[i].Var] = &t.Scopes[i]
	}
	seenIdx := map[string]bool{}
	for i, is := range ts.Indexes {
		if !identRe.MatchString(is.Name) {
			return nil, fmt.Errorf("indexes[%d].name %q: must match %s", i, is.Name, identRe)
		}
		if seenIdx[strings.ToLower(is.Name)] {
			return nil, fmt.Errorf("indexes[%d] %q: declared twice", i, is.Name)
		}
		seenIdx[strings.ToLower(is.Name)] = true
		if len(is.Columns) == 0 {
			return nil, fmt.Errorf("indexes[%d] %q: needs at least one column", i, is.Name)
		}
		ix := Index{Name: is.Name, Unique: is.Unique}
		for _, c := range is.Columns {
			ci, ok := t.colIdx[strings.ToLower(c)]
			if !ok {
				return nil, fmt.Errorf("indexes[%d] %q: column %q does not exist", i, is.Name, c)
			}
			ix.Columns = append(ix.Columns, ci)
		}
		t.Indexes = append(t.Indexes, ix)
	}
	return t, nil
}

func primaryKey(raw json.RawMessage) (string, error) {
	if len(raw) == 0 {
		return "", fmt.Errorf("primaryKey: required")
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return one, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return "", fmt.Errorf("primaryKey: must be a column name or a one-element list")
	}
	if len(many) != 1 {
		return "", fmt.Errorf("primaryKey: composite primary keys are not supported (got %d columns)", len(many))
	}
	return many[0], nil
}

func scopeSource(raw json.RawMessage) (pattern, column string, err error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, "", nil
	}
	var obj struct {
		Pattern string `json:"pattern"`
		Column  string `json:"column"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Pattern == "" {
		return "", "", fmt.Errorf("must be a pattern string or {\"pattern\",\"column\"}")
	}
	return obj.Pattern, obj.Column, nil
}

// HasEncrypted reports whether any column of t is encrypted (such tables
// never get SQLite segment images).
func (t *Table) HasEncrypted() bool {
	for _, m := range t.Meta {
		if m.Encrypted {
			return true
		}
	}
	return false
}

// Table returns the table named name, or nil.
func (s *Schema) Table(name string) *Table { return s.byName[name] }

// DeclaresVar reports whether any table declares scope variable v.
func (s *Schema) DeclaresVar(v string) bool { return s.vars[v] }

// Column returns the index of the column named name (case-insensitive), or -1.
func (t *Table) Column(name string) int {
	if i, ok := t.colIdx[strings.ToLower(name)]; ok {
		return i
	}
	return -1
}

// ScopeVar returns the declared scope variable v, or nil.
func (t *Table) ScopeVar(v string) *ScopeVar { return t.scopeOf[v] }

// IsScopeColumn reports whether column index i backs a scope variable.
func (t *Table) IsScopeColumn(i int) bool {
	for _, sv := range t.Scopes {
		if sv.Column == i {
			return true
		}
	}
	return false
}

// Demo is the built-in demo schema served by `synclane serve` without
// --schema: the todos table of the reference quickstart.
const Demo = `{
  "version": 1,
  "tables": [
    {
      "name": "todos",
      "columns": [
        {"name": "id", "type": "string", "nullable": false},
        {"name": "list_id", "type": "string", "nullable": false},
        {"name": "title", "type": "string", "nullable": false},
        {"name": "done", "type": "boolean", "nullable": false},
        {"name": "position", "type": "integer", "nullable": false},
        {"name": "updated_at_ms", "type": "integer", "nullable": false}
      ],
      "primaryKey": "id",
      "scopes": ["list:{list_id}"]
    }
  ]
}`

// MustDemo returns the compiled demo schema.
func MustDemo() *Schema {
	s, err := Parse([]byte(Demo))
	if err != nil {
		panic(err)
	}
	return s
}
