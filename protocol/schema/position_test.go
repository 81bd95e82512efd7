package schema

import (
	"errors"
	"strings"
	"testing"
)

// A schema that does not parse or compile is located in its text: the
// line and column of the bad byte, or of the start of the table at fault.
func TestParseErrorPositions(t *testing.T) {
	const good = `{"name":"todos","columns":[{"name":"id","type":"string"}],"primaryKey":"id","scopes":["a:{id}"]}`
	cases := []struct {
		name, text string
		line, col  int
		msg        string
	}{
		{"syntax", "{\n  \"version\": 1,\n  \"tables\": [\n    {\"name\": \"a\",,}\n  ]\n}", 4, 18, "invalid character ','"},
		{"wrong type", "{\n  \"version\": \"one\",\n  \"tables\": []\n}", 2, 14, "cannot unmarshal string"},
		{"unknown field", "{\n  \"version\": 1,\n  \"tabels\": []\n}", 3, 3, `unknown field "tabels"`},
		{"unknown nested field", "{\"version\": 1, \"tables\": [\n" + good + ",\n  {\"name\": \"b\", \"colums\": []}\n]}", 3, 17, `unknown field "colums"`},
		{"trailing data", "{\"version\": 1, \"tables\": [" + good + "]}\n\n  {}", 3, 3, "unexpected data after the schema object"},
		{"second table does not compile", "{\"version\": 1, \"tables\": [\n  " + good + ",\n  {\"name\": \"bad name\"}\n]}", 3, 3, `table "bad name"`},
		{"case-equal table names", "{\"version\": 1, \"tables\": [\n" + good + ",\n" + strings.Replace(good, "todos", "Todos", 1) + "\n]}", 3, 1, "ignoring case"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.text))
			var pe *PositionError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v: not located", err)
			}
			if pe.Line != c.line || pe.Column != c.col || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got line %d column %d (%v), want line %d column %d containing %q", pe.Line, pe.Column, err, c.line, c.col, c.msg)
			}
		})
	}
}

// An error Parse cannot place in the text (the schema as a whole) is not
// given a position.
func TestParseErrorWithoutPosition(t *testing.T) {
	_, err := Parse([]byte(`{"version": 0, "tables": []}`))
	var pe *PositionError
	if err == nil || errors.As(err, &pe) {
		t.Fatalf("error %v: want an unlocated error", err)
	}
}
