// Package operations is the registry of remote operations a host exposes
// (REMOTE.md revision 1): registered queries, which run host SQL against
// one partition's rows, and registered commands, whose Go code turns a
// request into an ordinary commit, and the Service that runs them
// (execute.go: lookup, authorization, the query on storage, the command as
// a job on the partition's actor) and counts them (stats.go). This package
// holds the definitions, their validation at registration, the SQL
// rewriting (template.go), scope coverage checks, result normalization and
// the executor; transports reach it through Engine.Operations.
//
// Every registration error is reported by AddQuery/AddCommand, so a
// deployment with a bad registry fails at startup, not per request.
package operations

import (
	"context"
	"fmt"
	"slices"

	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// Limits on registrations and requests.
const (
	// MaxIDBytes bounds operation IDs (registration) and the clientId,
	// operationId and requestId of a request.
	MaxIDBytes = 256
	// MaxRowsLimit is the largest Query.MaxRows.
	MaxRowsLimit = storage.MaxQueryRows
	// MaxMutations bounds the mutations one command invocation may return
	// (the engine's push operation cap applies too).
	MaxMutations = 500
)

// Caller is the authenticated caller of an operation: the actor and the
// partition the host's authentication mapped the request to, and the
// grants it asserted (for resolvers that trust them).
type Caller struct {
	ActorID   string
	Partition string
	Grants    map[string][]string
}

// AuthorizeFunc decides whether caller may run the operation with params.
// false denies (operation.forbidden); an error also denies (fail closed)
// and is logged.
type AuthorizeFunc func(ctx context.Context, caller Caller, params any) (bool, error)

// Column is one result column of a query: its name in the statement's
// result, and the type and nullability its values are normalized to.
type Column struct {
	Name     string
	Type     ssp2.ColumnType
	Nullable bool
}

// Coverage proves a scoped query reads only what its caller may: for one
// table the query reads, Params maps every scope variable the table
// declares to the params key holding the value(s) the query is
// restricted to (a string or an array of strings). The engine checks
// those values against the caller's allowed scopes before running the
// statement and restricts the table's relation to them.
type Coverage struct {
	Table  string
	Params map[string]string // scope variable → params object key
}

// Query is a registered query. Exactly one of Coverage (scoped) and
// Authorize (privileged) is set.
type Query struct {
	// ID is the stable operation ID (1..MaxIDBytes bytes).
	ID string
	// SQL is the statement, with {table} relation placeholders and "?"
	// parameters (see template.go's rules).
	SQL string
	// Columns is the result metadata: the columns returned, in order,
	// with the types their values are normalized to. Required, names
	// unique.
	Columns []Column
	// MaxRows is 1..MaxRowsLimit; a larger result fails with
	// operation.result_too_large (never a partial result).
	MaxRows int
	// Bind maps the request's params to the statement's "?" values in
	// order (nil, bool, int64, float64, string, []byte). An error is the
	// caller's (operation.invalid_request). Nil means the statement has
	// no "?".
	Bind func(params any) ([]any, error)
	// Coverage makes the query scoped: exactly one record per table the
	// statement reads, each covering every scope variable of its table.
	Coverage []Coverage
	// Authorize makes the query privileged: it grants access within the
	// caller's partition.
	Authorize AuthorizeFunc
}

// Mutation is one row write a command returns: a full-row upsert of
// Values (column name → value; every non-nullable column present, nil
// for NULL; the primary key column gives the row ID, its value rendered
// as a string: schema.RenderKey) or, with Delete, a delete of RowID (a
// row ID in that rendering: "42" for integer key 42). Values use the row codec's Go types: string, int64,
// float64, bool, json.RawMessage (json) and []byte (bytes, crdt); int and
// string (for json) are accepted and converted.
type Mutation struct {
	Table  string
	Delete bool
	RowID  string
	Values map[string]any
}

// RowReader reads current rows inside a command's transaction.
type RowReader interface {
	// GetRow returns the row of table with rowID (the key rendered as a
	// string, schema.RenderKey) as column name → value,
	// or nil when it is absent or its scope values are outside the
	// caller's resolved scopes.
	GetRow(ctx context.Context, table, rowID string) (map[string]any, error)
}

// Invocation is what a command's Run sees.
type Invocation struct {
	Caller    Caller
	RequestID string
	Params    any
	// Rows reads rows inside the command's transaction (under the
	// partition's write lock).
	Rows RowReader
	// query runs registered queries in the command's transaction
	// (Invocation.Query, txquery.go).
	query partition.CommandQuery
}

// Command is a registered command. Run executes on the partition's actor,
// inside the push transaction, after the idempotency recheck; it must not
// have external side effects (it may run again after a storage failure,
// and never for a retry of an applied or rejected invocation). Its
// mutations are applied as one ordinary commit: scope authorization,
// validators, constraints, the log and realtime fan-out all apply.
type Command struct {
	ID string
	// Authorize is mandatory; it runs before the partition is reached.
	Authorize AuthorizeFunc
	// Run returns 1..MaxMutations mutations. An error is a request
	// failure (operation.execution_failed, nothing stored); returning a
	// *syncerr.Error with an operation.* code passes that code through.
	Run func(ctx context.Context, inv Invocation) ([]Mutation, error)
}

// Registry holds the registered operations of one schema. Register
// before passing it to the engine; it is read-only afterwards and safe
// for concurrent use then.
type Registry struct {
	schema   *schema.Schema
	queries  map[string]*CompiledQuery
	commands map[string]*Command
}

// NewRegistry returns an empty registry for s.
func NewRegistry(s *schema.Schema) *Registry {
	return &Registry{schema: s, queries: map[string]*CompiledQuery{}, commands: map[string]*Command{}}
}

// Schema returns the schema the registry validates against.
func (r *Registry) Schema() *schema.Schema { return r.schema }

func checkID(id string) error {
	if id == "" || len(id) > MaxIDBytes {
		return fmt.Errorf("operation ID %q must be 1..%d bytes", id, MaxIDBytes)
	}
	return nil
}

func (r *Registry) taken(id string) error {
	if _, ok := r.queries[id]; ok {
		return fmt.Errorf("operation %q is already registered", id)
	}
	if _, ok := r.commands[id]; ok {
		return fmt.Errorf("operation %q is already registered", id)
	}
	return nil
}

// AddQuery validates and registers q.
func (r *Registry) AddQuery(q Query) error {
	cq, err := compileQuery(r.schema, q)
	if err != nil {
		return fmt.Errorf("operations: query %q: %w", q.ID, err)
	}
	if err := r.taken(q.ID); err != nil {
		return fmt.Errorf("operations: %w", err)
	}
	r.queries[q.ID] = cq
	return nil
}

// AddCommand validates and registers c.
func (r *Registry) AddCommand(c Command) error {
	if err := checkID(c.ID); err != nil {
		return fmt.Errorf("operations: %w", err)
	}
	if c.Authorize == nil || c.Run == nil {
		return fmt.Errorf("operations: command %q: Authorize and Run are required", c.ID)
	}
	if err := r.taken(c.ID); err != nil {
		return fmt.Errorf("operations: %w", err)
	}
	r.commands[c.ID] = &c
	return nil
}

// Query returns the registered query id, or nil.
func (r *Registry) Query(id string) *CompiledQuery { return r.queries[id] }

// Command returns the registered command id, or nil.
func (r *Registry) Command(id string) *Command { return r.commands[id] }

// CompiledQuery is a registered query with its statement compiled.
type CompiledQuery struct {
	Query
	parts  []storage.QueryPart
	binds  int
	tables []*schema.Table
	cover  map[string]Coverage
}

func compileQuery(s *schema.Schema, q Query) (*CompiledQuery, error) {
	if err := checkID(q.ID); err != nil {
		return nil, err
	}
	if q.MaxRows < 1 || q.MaxRows > MaxRowsLimit {
		return nil, fmt.Errorf("MaxRows %d is outside 1..%d", q.MaxRows, MaxRowsLimit)
	}
	if len(q.Columns) == 0 {
		return nil, fmt.Errorf("result column metadata is missing")
	}
	names := map[string]bool{}
	for _, c := range q.Columns {
		if c.Name == "" || names[c.Name] {
			return nil, fmt.Errorf("result column %q is empty or repeated", c.Name)
		}
		if c.Type < ssp2.TypeString || c.Type > ssp2.TypeCRDT {
			return nil, fmt.Errorf("result column %q has unknown type %d", c.Name, c.Type)
		}
		names[c.Name] = true
	}
	if (q.Authorize == nil) == (len(q.Coverage) == 0) {
		return nil, fmt.Errorf("exactly one of Coverage (scoped) and Authorize (privileged) must be set")
	}
	parts, binds, tables, err := compileSQL(s, q.SQL)
	if err != nil {
		return nil, err
	}
	if binds > 0 && q.Bind == nil {
		return nil, fmt.Errorf("the statement has %d \"?\" parameters and no Bind", binds)
	}
	cq := &CompiledQuery{Query: q, parts: parts, binds: binds, tables: tables}
	cq.Columns = slices.Clone(q.Columns)
	if len(q.Coverage) > 0 {
		cq.cover = map[string]Coverage{}
		for _, c := range q.Coverage {
			t := s.Table(c.Table)
			if t == nil {
				return nil, fmt.Errorf("coverage names unknown table %q", c.Table)
			}
			if _, dup := cq.cover[t.Name]; dup {
				return nil, fmt.Errorf("coverage repeats table %q", c.Table)
			}
			if !slices.Contains(tables, t) {
				return nil, fmt.Errorf("coverage names table %q the statement does not read", c.Table)
			}
			if len(c.Params) != len(t.Scopes) {
				return nil, fmt.Errorf("coverage of %q must cover exactly its %d scope variables", t.Name, len(t.Scopes))
			}
			for _, sv := range t.Scopes {
				if c.Params[sv.Var] == "" {
					return nil, fmt.Errorf("coverage of %q does not cover scope variable %q", t.Name, sv.Var)
				}
			}
			cq.cover[t.Name] = c
		}
		for _, t := range tables {
			if _, ok := cq.cover[t.Name]; !ok {
				return nil, fmt.Errorf("coverage has no record for table %q", t.Name)
			}
		}
	}
	return cq, nil
}

// Scoped reports whether the query is scoped (else privileged).
func (cq *CompiledQuery) Scoped() bool { return cq.cover != nil }

// Tables returns the names of the tables the statement reads, in order of
// first appearance.
func (cq *CompiledQuery) Tables() []string {
	out := make([]string, len(cq.tables))
	for i, t := range cq.tables {
		out[i] = t.Name
	}
	return out
}
