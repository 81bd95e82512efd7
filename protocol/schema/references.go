package schema

import (
	"fmt"
	"slices"
	"strings"

	"github.com/synclane/synclane/protocol/ssp2"
)

// Declared references (SPEC §6.11): a child column that names a row of a
// parent table by its primary key, with what a delete of the parent does
// to the children. The schema records them as the reference's schema IR
// does (typegen's IrReference), per table after "scopes", only when there
// are any:
//
//	"references": [{"column": "list_id", "parentTable": "lists", "onDelete": "CASCADE"}]
//
// Compile refuses, naming the table, the column and the reason: a column
// the table does not declare, or one given two references; a parent table
// the schema does not declare; a child column whose type differs from the
// parent's primary key; parent and child tables whose scope patterns
// differ; SET NULL on a non-nullable column; an onDelete other than
// RESTRICT, CASCADE or SET NULL (absent means RESTRICT). A reference
// always targets the parent's primary key (the IR has no other target).
// Each reference column gets a non-unique index in storage
// (ReferenceIndexIdent), through which the server finds a parent's
// children.

// OnDelete is what deleting a parent row does to its children.
type OnDelete string

// The delete actions of a reference.
const (
	// Restrict refuses the delete while children remain
	// (sync.reference_violation, restricted_delete).
	Restrict OnDelete = "RESTRICT"
	// Cascade deletes every child in the same commit.
	Cascade OnDelete = "CASCADE"
	// SetNull sets every child's reference column to NULL in the same
	// commit.
	SetNull OnDelete = "SET NULL"
)

// ReferenceSource is the JSON form of a declared reference.
type ReferenceSource struct {
	Column      string `json:"column"`
	ParentTable string `json:"parentTable"`
	OnDelete    string `json:"onDelete,omitempty"`
}

// Reference is a compiled reference of a child table's column to its
// parent table's primary key.
type Reference struct {
	// Column is the child column's index in the child table's Columns.
	Column int
	// Parent is the parent table.
	Parent *Table
	// OnDelete is the delete action.
	OnDelete OnDelete
}

// ChildReference is a reference as its parent table sees it: the child
// table and the reference.
type ChildReference struct {
	Child *Table
	Reference
}

// ReferenceIndexIdent is the storage name of the index of t's reference
// column i (see IndexIdent; kind KindReference).
func (t *Table) ReferenceIndexIdent(i int) string {
	return IndexIdent(t.Name, KindReference, t.Columns[i].Name)
}

// compileReferences resolves every table's references once all tables
// are compiled (a reference may name a table declared after its child, or
// its own table) and fills the parents' ReferencedBy. Errors are
// *tableError of the child table.
func (s *Schema) compileReferences(src Source) error {
	for ti, ts := range src.Tables {
		t := s.Tables[ti]
		fail := func(format string, args ...any) error {
			return &tableError{ti, fmt.Errorf("schema: table %q: %s", t.Name, fmt.Sprintf(format, args...))}
		}
		if len(ts.References) > MaxColumns {
			return fail("references: %d references, at most one per column", len(ts.References))
		}
		seen := map[int]bool{}
		for i, rs := range ts.References {
			ci, ok := t.colIdx[strings.ToLower(rs.Column)]
			if !ok {
				return fail("references[%d]: column %q does not exist", i, rs.Column)
			}
			col := t.Columns[ci]
			if seen[ci] {
				return fail("references[%d] column %q: declared twice (a column may declare one reference)", i, col.Name)
			}
			seen[ci] = true
			parent := s.byName[rs.ParentTable]
			if parent == nil {
				return fail("references[%d] column %q: parent table %q does not exist", i, col.Name, rs.ParentTable)
			}
			pk := parent.Columns[parent.PK]
			if col.Type != pk.Type {
				return fail("references[%d] column %q: type %s differs from the type %s of %q's primary key %q", i, col.Name,
					ssp2.ColumnTypeName(col.Type), ssp2.ColumnTypeName(pk.Type), parent.Name, pk.Name)
			}
			if !sameScopePatterns(t, parent) {
				return fail("references[%d] column %q: parent table %q has other scope patterns (%s) than this table (%s); a reference joins tables of the same scopes",
					i, col.Name, parent.Name, scopePatterns(parent), scopePatterns(t))
			}
			var od OnDelete
			switch rs.OnDelete {
			case "", string(Restrict):
				od = Restrict
			case string(Cascade):
				od = Cascade
			case string(SetNull):
				od = SetNull
				if !col.Nullable {
					return fail("references[%d] column %q: ON DELETE SET NULL needs a nullable column", i, col.Name)
				}
			default:
				return fail("references[%d] column %q: onDelete %q: must be \"RESTRICT\", \"CASCADE\" or \"SET NULL\"", i, col.Name, rs.OnDelete)
			}
			ref := Reference{Column: ci, Parent: parent, OnDelete: od}
			t.References = append(t.References, ref)
			parent.ReferencedBy = append(parent.ReferencedBy, ChildReference{Child: t, Reference: ref})
		}
	}
	return nil
}

// scopePatterns renders t's scope patterns, sorted: "prefix:{var}, ...".
func scopePatterns(t *Table) string {
	ps := make([]string, len(t.Scopes))
	for i, sv := range t.Scopes {
		ps[i] = sv.Prefix + ":{" + sv.Var + "}"
	}
	slices.Sort(ps)
	return strings.Join(ps, ", ")
}

// sameScopePatterns reports whether a and b declare the same scope
// patterns (prefix and variable), in any order.
func sameScopePatterns(a, b *Table) bool { return scopePatterns(a) == scopePatterns(b) }
