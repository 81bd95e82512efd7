package operations

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
)

// Registered SQL. A query's statement names every application table it
// reads through a relation placeholder, and every request value through a
// positional "?":
//
//	SELECT t.id, t.title FROM {tasks AS t} WHERE t.done = ? ORDER BY t.id
//
// "{table}" (aliased as the table's own name) or "{table AS alias}" is
// replaced by a derived table holding only the partition's rows of table
// (and, for scoped queries, only rows whose scope columns hold the
// verified values), with exactly the table's schema columns. "{{" and
// "}}" stand for literal braces outside strings. Placeholders inside
// string literals, quoted identifiers and comments are not recognised.
//
// The statement must be one SELECT (or WITH … SELECT) in the SQL subset
// SQLite and PostgreSQL share: "?" is rendered as "$n" on PostgreSQL, and
// "$n", "?NNN", ":name" and "@name" parameters are refused, as are ";"
// outside literals. As a guard against reading around the rewrite, a
// bare or quoted identifier equal (case-insensitively) to a schema table
// name or starting with "sync_" is refused unless it qualifies a column
// ("tasks.title"); the placeholders, not the guard, are what confine the
// statement to one partition.

var identRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// compileSQL splits src into storage query parts.
func compileSQL(s *schema.Schema, src string) (parts []storage.QueryPart, binds int, tables []*schema.Table, err error) {
	var text strings.Builder
	flush := func() {
		if text.Len() > 0 {
			parts = append(parts, storage.QueryPart{Text: text.String()})
			text.Reset()
		}
	}
	seen := map[string]bool{}
	n := len(src)
	for i := 0; i < n; {
		c := src[i]
		switch {
		case c == '\'':
			j := i + 1
			for ; j < n; j++ {
				if src[j] == '\'' {
					if j+1 < n && src[j+1] == '\'' {
						j++
						continue
					}
					break
				}
			}
			if j >= n {
				return nil, 0, nil, fmt.Errorf("unterminated string literal at byte %d", i)
			}
			text.WriteString(src[i : j+1])
			i = j + 1
		case c == '"':
			j := i + 1
			for ; j < n; j++ {
				if src[j] == '"' {
					if j+1 < n && src[j+1] == '"' {
						j++
						continue
					}
					break
				}
			}
			if j >= n {
				return nil, 0, nil, fmt.Errorf("unterminated quoted identifier at byte %d", i)
			}
			name := strings.ReplaceAll(src[i+1:j], `""`, `"`)
			if err := guard(s, name, src, j+1); err != nil {
				return nil, 0, nil, err
			}
			text.WriteString(src[i : j+1])
			i = j + 1
		case c == '-' && i+1 < n && src[i+1] == '-':
			j := strings.IndexByte(src[i:], '\n')
			if j < 0 {
				j = n - i
			}
			text.WriteString(src[i : i+j])
			i += j
		case c == '/' && i+1 < n && src[i+1] == '*':
			j := strings.Index(src[i+2:], "*/")
			if j < 0 {
				return nil, 0, nil, fmt.Errorf("unterminated comment at byte %d", i)
			}
			text.WriteString(src[i : i+2+j+2])
			i += j + 4
		case c == '{' && i+1 < n && src[i+1] == '{':
			text.WriteByte('{')
			i += 2
		case c == '}' && i+1 < n && src[i+1] == '}':
			text.WriteByte('}')
			i += 2
		case c == '}':
			return nil, 0, nil, fmt.Errorf("unmatched \"}\" at byte %d (write \"}}\" for a literal brace)", i)
		case c == '{':
			j := strings.IndexByte(src[i:], '}')
			if j < 0 {
				return nil, 0, nil, fmt.Errorf("unterminated relation placeholder at byte %d", i)
			}
			rel, err := relation(s, src[i+1:i+j])
			if err != nil {
				return nil, 0, nil, fmt.Errorf("relation placeholder at byte %d: %w", i, err)
			}
			flush()
			parts = append(parts, storage.QueryPart{Relation: rel})
			if !seen[rel.Table.Name] {
				seen[rel.Table.Name] = true
				tables = append(tables, rel.Table)
			}
			i += j + 1
		case c == '?':
			if i+1 < n && src[i+1] >= '0' && src[i+1] <= '9' {
				return nil, 0, nil, fmt.Errorf("numbered parameter at byte %d: use plain \"?\"", i)
			}
			flush()
			parts = append(parts, storage.QueryPart{Bind: true})
			binds++
			i++
		case c == ';':
			return nil, 0, nil, fmt.Errorf("\";\" at byte %d: a registered query is one statement", i)
		case (c == '$' || c == ':' || c == '@') && i+1 < n && isIdentStart(src[i+1], c == '$'):
			if c == ':' && i > 0 && src[i-1] == ':' { // a PostgreSQL cast (x::text)
				text.WriteByte(c)
				i++
				continue
			}
			return nil, 0, nil, fmt.Errorf("parameter %q at byte %d: use plain \"?\"", src[i:i+2], i)
		case isIdentStart(c, false):
			j := i + 1
			for j < n && isIdentPart(src[j]) {
				j++
			}
			if err := guard(s, src[i:j], src, j); err != nil {
				return nil, 0, nil, err
			}
			text.WriteString(src[i:j])
			i = j
		default:
			text.WriteByte(c)
			i++
		}
	}
	flush()
	if len(tables) == 0 {
		return nil, 0, nil, fmt.Errorf("the statement reads no application table (name each through {table})")
	}
	return parts, binds, tables, nil
}

func isIdentStart(c byte, digits bool) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (digits && c >= '0' && c <= '9')
}

func isIdentPart(c byte) bool { return isIdentStart(c, true) || c == '$' }

// guard refuses an identifier that names a table outside a placeholder:
// a schema table or a system table (sync_ prefix), unless the identifier
// qualifies a column (it is followed by ".").
func guard(s *schema.Schema, name, src string, after int) error {
	lower := strings.ToLower(name)
	hit := strings.HasPrefix(lower, "sync_")
	if !hit {
		for _, t := range s.Tables {
			if strings.EqualFold(t.Name, name) {
				hit = true
				break
			}
		}
	}
	if !hit {
		return nil
	}
	k := after
	for k < len(src) && (src[k] == ' ' || src[k] == '\t' || src[k] == '\n' || src[k] == '\r') {
		k++
	}
	if k < len(src) && src[k] == '.' {
		return nil
	}
	return fmt.Errorf("identifier %q names a table outside a relation placeholder; write {%s}", name, name)
}

// relation parses the inside of a placeholder: "table" or "table AS alias".
func relation(s *schema.Schema, in string) (*storage.QueryRelation, error) {
	f := strings.Fields(in)
	var name, alias string
	switch {
	case len(f) == 1:
		name, alias = f[0], f[0]
	case len(f) == 3 && strings.EqualFold(f[1], "AS"):
		name, alias = f[0], f[2]
	default:
		return nil, fmt.Errorf("%q is not \"table\" or \"table AS alias\"", in)
	}
	t := s.Table(name)
	if t == nil {
		return nil, fmt.Errorf("unknown table %q", name)
	}
	if !identRe.MatchString(alias) {
		return nil, fmt.Errorf("alias %q is not an identifier", alias)
	}
	return &storage.QueryRelation{Table: t, Alias: alias}, nil
}
