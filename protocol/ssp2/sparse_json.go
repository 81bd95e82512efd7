package ssp2

import "encoding/json"

// RenderSparseJSON renders sr, a sparse row of cols, as SPEC §11.1 rule 11
// does (the push vectors' form): {"columns":[…],"values":{…}}, the columns
// as rule-8 column objects and values holding the present columns only, in
// column order, with the rule-8 value forms (RenderRowJSON); a present
// NULL is null, an absent column has no key. sr.Row must have len(cols)
// values and sr.Present must be a presence set over cols; the values of
// absent columns are ignored.
func RenderSparseJSON(cols []Column, sr SparseRow) ([]byte, error) {
	b := make([]byte, 0, 256)
	top := openObj(&b)
	top.key("columns")
	b = appendColumnsJSON(b, cols)
	top.key("values")
	var err error
	if b, err = renderValues(b, cols, sr.Row, sr.Present, true); err != nil {
		return nil, err
	}
	top.close()
	return b, nil
}

// RenderSparseValuesJSON renders only the values object of
// RenderSparseJSON: {name: value} for the present columns of sr.
func RenderSparseValuesJSON(cols []Column, sr SparseRow) ([]byte, error) {
	return renderValues(nil, cols, sr.Row, sr.Present, true)
}

// ParseSparseJSON parses a rule-11 rendering (the inverse of
// RenderSparseJSON) into its columns and the sparse row, whose Present is
// the set of columns values has a key for. Unknown members, keys that name
// no column and values not of their column's JSON form are errors. json
// values are re-serialized compactly. A rendering cannot tell NULL from a
// non-finite float or from a json value whose text is null: those read as
// a present NULL. The row
// is not checked against nullability, the primary key or ranges:
// RowCodec.AppendSparse does that when it is encoded.
func ParseSparseJSON(b []byte) ([]Column, SparseRow, error) {
	top, err := parseObject("sparse row", b)
	if err != nil {
		return nil, SparseRow{}, err
	}
	cols := parseColumns(top, "columns")
	vraw, _ := top.get("values", true)
	if err := top.done(); err != nil {
		return nil, SparseRow{}, err
	}
	sr, err := ParseSparseValuesJSON("sparse row", cols, vraw)
	if err != nil {
		return nil, SparseRow{}, err
	}
	return cols, sr, nil
}

// ParseSparseValuesJSON parses a values object of cols as
// RenderSparseValuesJSON writes it: each key present names a present
// column (null for a present NULL), a column without a key is absent. where
// names the object in error messages. Checks as ParseSparseJSON.
func ParseSparseValuesJSON(where string, cols []Column, b []byte) (SparseRow, error) {
	row, present, err := parseValues(where, cols, json.RawMessage(b), true)
	if err != nil {
		return SparseRow{}, err
	}
	return SparseRow{Row: row, Present: present}, nil
}
