package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
)

// What a backend can store. Every backend checks writes with the Check
// functions below before it writes anything, so a value one backend cannot
// store is refused by all of them, identically, at the call that carries
// it: PushTx.PutRow, AppendCommit and PutIdempotency, PutClient and
// BindClient. A refused write leaves the transaction as it was (on
// PostgreSQL the statement is never sent, so the transaction is not
// aborted and the other commits of a group commit are unaffected).

// ErrUnstorable reports a value no backend stores: a string that is not
// valid UTF-8 or contains U+0000 (PostgreSQL text holds neither), an
// identifier longer than MaxIdentifierBytes, or an index key longer than
// MaxIndexKeyBytes (PostgreSQL's btree refuses index rows above about
// 2,700 bytes). Every backend refuses exactly the same inputs, even one
// (SQLite, memory) that could hold them.
var ErrUnstorable = errors.New("storage: value cannot be stored")

// Storage limits, in bytes, every backend enforces identically. They leave
// room above the engine's request limits, so a request the engine accepts
// is never refused here.
const (
	// MaxIdentifierBytes bounds each identifier: a partition name, client
	// ID, client commit ID, row ID (primary key value), change table name,
	// scope var and scope value (of a change, or held by a row's scope
	// column).
	MaxIdentifierBytes = 1024
	// MaxIndexKeyBytes bounds the key of every index a backend keeps: the
	// partition name plus the key's values, strings and byte slices by
	// their length and other non-NULL values as 8 bytes. The indexed keys
	// are listed at CheckCommit, CheckIdempotency, CheckRow and
	// CheckClient. The limit fits PostgreSQL's btree index row size with
	// room for its tuple overhead.
	MaxIndexKeyBytes = 2048
)

// Storable reports whether every backend can store s as text: s is valid
// UTF-8 and holds no U+0000. A key that is not Storable is never stored,
// so reads treat it as absent rather than sending it to the database.
func Storable(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// StorableValues returns the values of vals that are Storable, in order
// (vals itself when all are). Scans drop the others: they match nothing
// stored.
func StorableValues(vals []string) []string {
	for i, v := range vals {
		if Storable(v) {
			continue
		}
		out := slices.Clone(vals[:i])
		for _, v := range vals[i+1:] {
			if Storable(v) {
				out = append(out, v)
			}
		}
		return out
	}
	return vals
}

// QuoteID renders an identifier for an error message: Go-quoted, cut to
// its first 64 bytes (then followed by "...(N bytes)").
func QuoteID(s string) string {
	if len(s) <= 64 {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:64]) + "...(" + strconv.Itoa(len(s)) + " bytes)"
}

func unstorable(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnstorable, fmt.Sprintf(format, args...))
}

// checkText refuses a string that is not Storable.
func checkText(what, s string) error {
	if !utf8.ValidString(s) {
		return unstorable("%s %s is not valid UTF-8", what, QuoteID(s))
	}
	if strings.IndexByte(s, 0) >= 0 {
		return unstorable("%s %s contains U+0000", what, QuoteID(s))
	}
	return nil
}

// checkIdent refuses an identifier that is not Storable or longer than
// MaxIdentifierBytes.
func checkIdent(what, s string) error {
	if err := checkText(what, s); err != nil {
		return err
	}
	if len(s) > MaxIdentifierBytes {
		return unstorable("%s %s exceeds MaxIdentifierBytes (%d)", what, QuoteID(s), MaxIdentifierBytes)
	}
	return nil
}

// checkKey refuses an index key of n bytes over MaxIndexKeyBytes.
func checkKey(what string, n int) error {
	if n > MaxIndexKeyBytes {
		return unstorable("%s key of %d bytes exceeds MaxIndexKeyBytes (%d)", what, n, MaxIndexKeyBytes)
	}
	return nil
}

// keyBytes is the size a value counts for in an index key.
func keyBytes(v any) int {
	switch x := v.(type) {
	case nil:
		return 0
	case string:
		return len(x)
	case []byte:
		return len(x)
	case json.RawMessage:
		return len(x)
	}
	return 8
}

// CheckPartition returns nil when every backend can store the partition
// name (Storable, at most MaxIdentifierBytes), else an error wrapping
// ErrUnstorable. BeginPush, TouchPartition and RotateLogEpoch check it.
func CheckPartition(partition string) error {
	return checkIdent("partition", partition)
}

// CheckCommit returns nil when every backend can store c in partition,
// else an error wrapping ErrUnstorable naming the first offending field.
// Every string must be Storable; the client ID, client commit ID and each
// change's table, row ID, scope vars and scope values are identifiers
// (at most MaxIdentifierBytes); the index keys (partition, table, seq,
// idx) and (partition, table, var, value, seq, idx) fit MaxIndexKeyBytes.
func CheckCommit(partition string, c CommitRecord) error {
	if err := CheckPartition(partition); err != nil {
		return err
	}
	if err := checkText("actor id", c.ActorID); err != nil {
		return err
	}
	if err := checkIdent("client id", c.ClientID); err != nil {
		return err
	}
	if err := checkIdent("client commit id", c.ClientCommitID); err != nil {
		return err
	}
	for i, ch := range c.Changes {
		what := "change " + strconv.Itoa(i)
		if err := checkIdent(what+" table", ch.Table); err != nil {
			return err
		}
		if err := checkIdent(what+" row id", ch.RowID); err != nil {
			return err
		}
		base := len(partition) + len(ch.Table) + 16 // + seq, idx
		if err := checkKey(what+" table index", base); err != nil {
			return err
		}
		for v, val := range ch.Scopes {
			if checkScope(what, base, v, val) != nil {
				// Report the first offending var in name order, so the
				// error does not depend on map iteration order.
				for _, v := range slices.Sorted(maps.Keys(ch.Scopes)) {
					if err := checkScope(what, base, v, ch.Scopes[v]); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

func checkScope(what string, base int, v, val string) error {
	if err := checkIdent(what+" scope var", v); err != nil {
		return err
	}
	if err := checkIdent(what+" scope "+strconv.Quote(v)+" value", val); err != nil {
		return err
	}
	return checkKey(what+" scope index", base+len(v)+len(val))
}

// CheckIdempotency returns nil when every backend can store rec in
// partition, else an error wrapping ErrUnstorable: the client ID and
// client commit ID are identifiers, and the key (partition, client ID,
// client commit ID) fits MaxIndexKeyBytes.
func CheckIdempotency(partition string, rec IdempotencyRecord) error {
	if err := CheckPartition(partition); err != nil {
		return err
	}
	if err := checkIdent("client id", rec.ClientID); err != nil {
		return err
	}
	if err := checkIdent("client commit id", rec.ClientCommitID); err != nil {
		return err
	}
	return checkKey("idempotency", len(partition)+len(rec.ClientID)+len(rec.ClientCommitID))
}

// CheckRow returns nil when every backend can store rec as a row of t in
// partition, else an error wrapping both ErrUnstorable and ErrConstraint
// (to the writer, a row value the store refuses is a constraint of the
// table). Every string and json value must be Storable; the row ID and
// each string held by a scope column are identifiers; and these keys fit
// MaxIndexKeyBytes: the primary key (partition, row ID), each scope
// column's (partition, value, row ID), each declared index's
// (partition, values...) and each reference column's (partition, value,
// row ID; schema.Table.ReferenceIndexIdent). Values outside t's columns
// are ignored (the backend reports the arity mismatch).
func CheckRow(partition string, t *schema.Table, rec RowRecord) error {
	if err := checkRow(partition, t, rec); err != nil {
		return fmt.Errorf("%w (%w)", err, ErrConstraint)
	}
	return nil
}

func checkRow(partition string, t *schema.Table, rec RowRecord) error {
	if err := CheckPartition(partition); err != nil {
		return err
	}
	if err := checkIdent("row id", rec.RowID); err != nil {
		return err
	}
	if err := checkKey("primary", len(partition)+len(rec.RowID)); err != nil {
		return err
	}
	val := func(i int) any {
		if i < len(rec.Values) {
			return rec.Values[i]
		}
		return nil
	}
	for i, c := range t.Columns {
		var err error
		switch x := val(i).(type) {
		case string:
			err = checkText("column "+c.Name+" value", x)
		case json.RawMessage:
			err = checkText("column "+c.Name+" value", string(x))
		}
		if err != nil {
			return err
		}
	}
	for _, sv := range t.Scopes {
		v := val(sv.Column)
		if s, ok := v.(string); ok {
			if err := checkIdent("scope column "+t.Columns[sv.Column].Name+" value", s); err != nil {
				return err
			}
		}
		if sv.Column != t.PK {
			if err := checkKey("scope column "+t.Columns[sv.Column].Name, len(partition)+keyBytes(v)+len(rec.RowID)); err != nil {
				return err
			}
		}
	}
	for _, ix := range t.Indexes {
		n := len(partition)
		for _, c := range ix.Columns {
			n += keyBytes(val(c))
		}
		if err := checkKey("index "+ix.Name, n); err != nil {
			return err
		}
	}
	for _, r := range t.References {
		if r.Column == t.PK {
			continue // the primary key's own key, checked above
		}
		if err := checkKey("reference column "+t.Columns[r.Column].Name, len(partition)+keyBytes(val(r.Column))+len(rec.RowID)); err != nil {
			return err
		}
	}
	return nil
}

// CheckTombstone returns nil when every backend can store the delete
// tombstone of row rowID of table in partition (SPEC §2.2), else an error
// wrapping ErrUnstorable. It refuses exactly the row IDs CheckRow refuses
// as a primary key: not an identifier, or (partition, row ID) over
// MaxIndexKeyBytes (the tombstone key adds the table name, at most
// schema.MaxIdentBytes, which the limit's room for tuple overhead
// covers). So every row that can exist can get a tombstone, and a row ID
// it refuses never had a row: PushTx.DeleteRow records no tombstone for
// it and PushTx.Tombstone reads 0, on every backend alike, without asking
// the database.
func CheckTombstone(partition, table, rowID string) error {
	if err := CheckPartition(partition); err != nil {
		return err
	}
	if err := checkIdent("tombstone table", table); err != nil {
		return err
	}
	if err := checkIdent("tombstone row id", rowID); err != nil {
		return err
	}
	return checkKey("tombstone", len(partition)+len(rowID))
}

// CheckTombstoneOf is CheckTombstone for a row of t: it also refuses a
// rowID that names no key of t (KeyValue: "abc" for an integer key), for
// which no row can exist either. The backends' DeleteRow, Tombstone and
// ClearTombstone use it, so such a row id gets no tombstone and reads 0.
func CheckTombstoneOf(partition string, t *schema.Table, rowID string) error {
	if err := CheckTombstone(partition, t.Name, rowID); err != nil {
		return err
	}
	if _, ok := KeyValue(t, rowID); !ok {
		return unstorable("tombstone row id %s names no %s key of table %s", QuoteID(rowID), ssp2.ColumnTypeName(t.Columns[t.PK].Type), t.Name)
	}
	return nil
}

// CheckClient returns nil when every backend can store rec in partition,
// else an error wrapping ErrUnstorable: the client ID is an identifier,
// the actor ID and the subscriptions are Storable text, and the key
// (partition, client ID) fits MaxIndexKeyBytes.
func CheckClient(partition string, rec ClientRecord) error {
	if err := CheckPartition(partition); err != nil {
		return err
	}
	if err := checkIdent("client id", rec.ClientID); err != nil {
		return err
	}
	if err := checkText("actor id", rec.ActorID); err != nil {
		return err
	}
	if err := checkText("subscriptions", string(rec.Subscriptions)); err != nil {
		return err
	}
	return checkKey("client", len(partition)+len(rec.ClientID))
}

// StorableClients implements PutClient's skipping rule: it returns the
// records of recs that CheckClient accepts, in order, and, when it
// dropped any, an error wrapping ErrUnstorable that names every dropped
// client ID (QuoteID) and not the kept ones.
func StorableClients(partition string, recs []ClientRecord) ([]ClientRecord, error) {
	var (
		keep    []ClientRecord
		skipped []string
		first   error
	)
	for i, r := range recs {
		err := CheckClient(partition, r)
		if err == nil {
			if keep != nil {
				keep = append(keep, r)
			}
			continue
		}
		if keep == nil {
			keep = slices.Clone(recs[:i])
			if keep == nil {
				keep = []ClientRecord{}
			}
		}
		if first == nil {
			first = err
		}
		skipped = append(skipped, QuoteID(r.ClientID))
	}
	if keep == nil {
		return recs, nil
	}
	return keep, fmt.Errorf("skipped %d unstorable client records %s (first: %w)", len(skipped), strings.Join(skipped, ", "), first)
}
