package storage

import (
	"context"
	"errors"

	"github.com/synclane/synclane/protocol/schema"
)

// Registered (remote) queries: a host-registered SQL statement executed
// against one partition's rows (REMOTE.md §2). The engine compiles the
// statement into parts; the backend renders every relation part as a
// derived table over the partition's rows and runs the whole statement
// read-only, in one snapshot together with the partition's max commit seq
// and the serve gate.

// Sentinel errors of Querier.Query.
var (
	// ErrQueryTooLarge reports a result of more than Query.MaxRows rows;
	// no row is returned.
	ErrQueryTooLarge = errors.New("storage: query result exceeds its row limit")
	// ErrQueryFailed wraps the database's failure to execute the
	// registered statement itself (syntax, types, a write attempted by a
	// read-only statement). Failures to open the snapshot or read the
	// gate are returned without it.
	ErrQueryFailed = errors.New("storage: registered query failed")
	// ErrTxQueryUnsupported is returned by PushTx.Query of a backend that
	// cannot run registered queries inside its push transaction (the
	// in-memory store, which has no SQL). Nothing is read.
	ErrTxQueryUnsupported = errors.New("storage: the backend cannot run a registered query inside a push transaction")
)

// MaxQueryRows is the largest Query.MaxRows a backend accepts.
const MaxQueryRows = 10_000

// QueryPart is one piece of a registered statement, in order. Exactly one
// of its fields is set: Text is copied verbatim, Bind takes the next value
// of Query.Args as a positional parameter, Relation is rendered as a
// derived table.
type QueryPart struct {
	Text     string
	Bind     bool
	Relation *QueryRelation
}

// QueryRelation is one occurrence of an application table in a registered
// statement. The backend renders it as a parenthesised SELECT of exactly
// the table's schema columns, restricted to the partition and to Filters,
// aliased as Alias.
type QueryRelation struct {
	Table *schema.Table
	Alias string
	// Filters restrict the relation to rows whose scope column holds one
	// of the values (scope values as strings, like RowQuery.Scopes; an
	// integer column's value is compared as its canonical decimal form,
	// and a value that is not one matches nothing).
	Filters []ScopeFilter
}

// ScopeFilter is one scope column restriction of a QueryRelation.
type ScopeFilter struct {
	Column int // index into Table.Columns
	Values []string
}

// Query is a compiled registered statement bound for one request.
type Query struct {
	Parts []QueryPart
	// Args holds one value per Bind part: nil, bool, int64, float64,
	// string or []byte.
	Args []any
	// MaxRows is 1..MaxQueryRows; the statement runs with LIMIT MaxRows+1
	// and a longer result fails with ErrQueryTooLarge.
	MaxRows int
}

// QueryResult is the answer of Querier.Query: the statement's column
// names, its rows (driver values: nil, int64, float64, string, []byte,
// bool, or what the driver scans for other column types), and the
// partition's max commit seq read in the same snapshot (0 for a partition
// never written).
type QueryResult struct {
	Columns      []string
	Rows         [][]any
	MaxCommitSeq int64
}

// Querier is the Queries role of a backend: it executes registered
// queries. The engine needs it when registered remote queries are
// configured (engine.Config.Operations.Registry). The SQL backends have it; the
// in-memory store, which cannot run SQL, does not.
type Querier interface {
	// Query opens one read-only snapshot, reads the serve gate of
	// partition at the running schema version and calls check with it
	// (a non-nil result is returned as is and nothing else runs), then
	// reads the partition's max commit seq and executes q, all in that
	// snapshot. It fails with ErrQueryTooLarge, ErrQueryFailed or a
	// storage error; it never writes.
	Query(ctx context.Context, partition string, running int32, q Query, check func(ServeGate) error) (QueryResult, error)
}

// QueryDialect is what differs between SQL backends when a Query is
// rendered: how a positional parameter is written and how a row table is
// named.
type QueryDialect struct {
	// Placeholder writes the n-th (1-based) positional parameter.
	Placeholder func(n int) string
	// Table returns the quoted (and, where needed, qualified) name of the
	// row table of t.
	Table func(t *schema.Table) string
	// IntList and TextList render "col IN list" for a scope filter whose
	// values have been converted (canonical int64s, storable strings);
	// they receive the parameter's placeholder and return the SQL and the
	// one parameter value to bind.
	IntList  func(col, ph string, vals []int64) (string, any)
	TextList func(col, ph string, vals []string) (string, any)
}

// QuoteIdent quotes an SQL identifier with double quotes (both SQL
// backends share this form).
func QuoteIdent(id string) string {
	b := make([]byte, 0, len(id)+2)
	b = append(b, '"')
	for i := 0; i < len(id); i++ {
		if id[i] == '"' {
			b = append(b, '"')
		}
		b = append(b, id[i])
	}
	return string(append(b, '"'))
}

// RenderQuery renders q for partition: every relation becomes
// "(SELECT <the table's columns> FROM <table> WHERE partition_id = ?
// [AND <filters>]) AS <alias>", every bind part a placeholder, and the
// whole statement is wrapped as "SELECT * FROM (<statement>) AS
// synclane_query LIMIT MaxRows+1". It returns the SQL and its arguments
// in placeholder order. A filter left with no value (none is a canonical
// integer or storable string) renders as an always-false condition.
func RenderQuery(q Query, partition string, d QueryDialect) (string, []any, error) {
	if q.MaxRows < 1 || q.MaxRows > MaxQueryRows {
		return "", nil, errors.New("storage: query MaxRows out of range 1..10000")
	}
	var sb []byte
	var args []any
	next := func(v any) string {
		args = append(args, v)
		return d.Placeholder(len(args))
	}
	sb = append(sb, "SELECT * FROM ("...)
	bind := 0
	for _, p := range q.Parts {
		switch {
		case p.Relation != nil:
			r := p.Relation
			sb = append(sb, "(SELECT "...)
			for i, c := range r.Table.Columns {
				if i > 0 {
					sb = append(sb, ", "...)
				}
				sb = append(sb, QuoteIdent(c.Name)...)
			}
			sb = append(sb, " FROM "...)
			sb = append(sb, d.Table(r.Table)...)
			sb = append(sb, " WHERE partition_id = "...)
			sb = append(sb, next(partition)...)
			for _, f := range r.Filters {
				if f.Column < 0 || f.Column >= len(r.Table.Columns) {
					return "", nil, errors.New("storage: query filter names no column")
				}
				col := QuoteIdent(r.Table.Columns[f.Column].Name)
				var frag string
				var arg any
				if isIntegerColumn(r.Table, f.Column) {
					ns := CanonicalInts(f.Values)
					if len(ns) == 0 {
						sb = append(sb, " AND 1 = 0"...)
						continue
					}
					frag, arg = d.IntList(col, d.Placeholder(len(args)+1), ns)
				} else {
					ss := StorableValues(f.Values)
					if len(ss) == 0 {
						sb = append(sb, " AND 1 = 0"...)
						continue
					}
					frag, arg = d.TextList(col, d.Placeholder(len(args)+1), ss)
				}
				args = append(args, arg)
				sb = append(sb, " AND "...)
				sb = append(sb, frag...)
			}
			sb = append(sb, ") AS "...)
			sb = append(sb, QuoteIdent(r.Alias)...)
		case p.Bind:
			if bind >= len(q.Args) {
				return "", nil, errors.New("storage: query has more parameters than arguments")
			}
			sb = append(sb, next(q.Args[bind])...)
			bind++
		default:
			sb = append(sb, p.Text...)
		}
	}
	if bind != len(q.Args) {
		return "", nil, errors.New("storage: query has more arguments than parameters")
	}
	sb = append(sb, "\n) AS synclane_query LIMIT "...)
	sb = append(sb, next(int64(q.MaxRows+1))...)
	return string(sb), args, nil
}
