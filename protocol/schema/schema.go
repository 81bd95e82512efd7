// Package schema compiles a synclane server schema (the reference
// ServerSchema as JSON) into the validated, indexed form the engine, the
// storage backends and the row codec use.
//
// A compiled *Schema is immutable and safe for concurrent use.
package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
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
	// References are the table's declared references (references.go),
	// recorded only when there are any.
	References []ReferenceSource `json:"references,omitempty"`
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
	// PK is the index in Columns of the primary-key column: a non-null
	// string, integer, boolean or json column whose value, rendered as a
	// string (RenderKey), is the wire rowId (keys.go).
	PK      int
	Scopes  []ScopeVar
	Indexes []Index
	// Meta holds each column's IR-only metadata, parallel to Columns.
	Meta []ColumnMeta
	// References are the table's declared references, in declaration
	// order; ReferencedBy the references other tables (or this one)
	// declare to it (references.go).
	References   []Reference
	ReferencedBy []ChildReference
	colIdx       map[string]int
	scopeOf      map[string]*ScopeVar
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

// Parse decodes JSON schema text (exactly one JSON object, nothing after
// it but white space) and compiles it with the default Options.
func Parse(data []byte) (*Schema, error) { return ParseWith(data, Options{}) }

// ParseWith is Parse with opts.
func ParseWith(data []byte, opts Options) (*Schema, error) {
	var src Source
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&src); err != nil {
		return nil, locate(data, fmt.Errorf("schema: parse: %w", err))
	}
	end := dec.InputOffset()
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		off := end
		for off < int64(len(data)) && strings.IndexByte(" \t\r\n", data[off]) >= 0 {
			off++
		}
		return nil, positioned(data, off, fmt.Errorf("schema: parse: unexpected data after the schema object at byte %d", off))
	}
	s, err := CompileWith(src, opts)
	if err != nil {
		return nil, locate(data, err)
	}
	return s, nil
}

// Compile validates src with the default Options and returns the compiled
// schema. Errors name the table and field at fault.
func Compile(src Source) (*Schema, error) { return CompileWith(src, Options{}) }

// CompileWith validates src and returns the compiled schema. Errors name
// the table, column or index at fault. Everything it accepts fits both
// storage backends (see the Max* limits): a schema that compiles never
// fails storage setup for its shape.
func CompileWith(src Source, opts Options) (*Schema, error) {
	if src.Version < 1 {
		return nil, fmt.Errorf("schema: version must be >= 1, got %d", src.Version)
	}
	if len(src.Tables) == 0 {
		return nil, fmt.Errorf("schema: at least one table is required")
	}
	if len(src.Tables) > MaxTables {
		return nil, fmt.Errorf("schema: %d tables, at most %d are allowed", len(src.Tables), MaxTables)
	}
	crdt := map[string]bool{DefaultCRDTType: true}
	for _, c := range opts.CRDTTypes {
		crdt[c] = true
	}
	s := &Schema{Version: src.Version, byName: map[string]*Table{}, vars: map[string]bool{}}
	folded := map[string]string{}     // lower-case table name -> declared name
	derived := map[string][2]string{} // lower-case derived index name -> table, index
	for i, ts := range src.Tables {
		t, err := compileTable(ts, crdt)
		if err != nil {
			name := ts.Name
			if name == "" {
				name = fmt.Sprintf("#%d", i)
			}
			return nil, &tableError{i, fmt.Errorf("schema: table %q: %w", name, err)}
		}
		if prev, dup := folded[strings.ToLower(t.Name)]; dup {
			if prev == t.Name {
				return nil, &tableError{i, fmt.Errorf("schema: table %q: declared twice", t.Name)}
			}
			return nil, &tableError{i, fmt.Errorf("schema: table %q: same name as table %q ignoring case (SQLite would store both in one table)", t.Name, prev)}
		}
		folded[strings.ToLower(t.Name)] = t.Name
		s.byName[t.Name] = t
		s.Tables = append(s.Tables, t)
		for _, sv := range t.Scopes {
			s.vars[sv.Var] = true
		}
	}
	if err := s.compileReferences(src); err != nil {
		return nil, err
	}
	// Storage names of every index, references' included (so after they
	// are compiled): no two may collide, and their number is bounded.
	for i, t := range s.Tables {
		for _, id := range t.derivedIdents() {
			key := strings.ToLower(id[0])
			if prev, dup := derived[key]; dup {
				return nil, &tableError{i, fmt.Errorf("schema: table %q: index %q: its storage name %q collides with that of table %q index %q; rename one", t.Name, id[1], id[0], prev[0], prev[1])}
			}
			derived[key] = [2]string{t.Name, id[1]}
		}
		if len(derived) > MaxSchemaIndexes {
			return nil, &tableError{i, fmt.Errorf("schema: table %q: the schema needs more than %d indexes (declared ones, one per scope column, one per reference column)", t.Name, MaxSchemaIndexes)}
		}
	}
	return s, nil
}

func compileTable(ts TableSource, crdt map[string]bool) (*Table, error) {
	if !identRe.MatchString(ts.Name) {
		return nil, fmt.Errorf("name: must match %s", identRe)
	}
	low := strings.ToLower(ts.Name)
	for _, p := range reservedTablePrefixes {
		if strings.HasPrefix(low, p) {
			return nil, fmt.Errorf("name: prefixes %s are reserved (case-insensitive)", strings.Join(reservedTablePrefixes, ", "))
		}
	}
	if len(ts.Columns) == 0 {
		return nil, fmt.Errorf("columns: at least one column is required")
	}
	if len(ts.Columns) > MaxColumns {
		return nil, fmt.Errorf("columns: %d columns, at most %d are allowed", len(ts.Columns), MaxColumns)
	}
	if len(ts.Indexes) > MaxIndexes {
		return nil, fmt.Errorf("indexes: %d indexes, at most %d are allowed", len(ts.Indexes), MaxIndexes)
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
		if prev, dup := t.colIdx[strings.ToLower(cs.Name)]; dup {
			if t.Columns[prev].Name != cs.Name {
				return nil, fmt.Errorf("columns[%d] %q: declared twice (as %q: column names are compared ignoring case)", i, cs.Name, t.Columns[prev].Name)
			}
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
		if typ == ssp2.TypeCRDT && !crdt[cs.CrdtType] {
			return nil, fmt.Errorf("columns[%d] %q: unknown crdtType %q (known: %s)", i, cs.Name, cs.CrdtType, strings.Join(slices.Sorted(maps.Keys(crdt)), ", "))
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
	if c := t.Columns[pki]; !KeyTypeEligible(c.Type) {
		return nil, fmt.Errorf("primaryKey %q: a %s column cannot be a primary key (SPEC §2.4: the key must be string, integer, boolean or json, whose rowId rendering every implementation shares)", pk, ssp2.ColumnTypeName(c.Type))
	} else if c.Nullable {
		return nil, fmt.Errorf("primaryKey %q: must be a non-nullable column", pk)
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
	seenIdx := map[string]string{}
	for i, is := range ts.Indexes {
		if !identRe.MatchString(is.Name) {
			return nil, fmt.Errorf("indexes[%d].name %q: must match %s", i, is.Name, identRe)
		}
		if prev, ok := seenIdx[strings.ToLower(is.Name)]; ok {
			if prev != is.Name {
				return nil, fmt.Errorf("indexes[%d] %q: declared twice (as %q: index names are compared ignoring case)", i, is.Name, prev)
			}
			return nil, fmt.Errorf("indexes[%d] %q: declared twice", i, is.Name)
		}
		seenIdx[strings.ToLower(is.Name)] = is.Name
		if len(is.Columns) == 0 {
			return nil, fmt.Errorf("indexes[%d] %q: needs at least one column", i, is.Name)
		}
		if len(is.Columns) > MaxIndexColumns {
			return nil, fmt.Errorf("indexes[%d] %q: %d columns, at most %d are allowed", i, is.Name, len(is.Columns), MaxIndexColumns)
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
