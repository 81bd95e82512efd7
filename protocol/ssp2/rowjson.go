package ssp2

// RenderRowJSON renders one row of cols as a JSON object {column name:
// value} in column order, exactly as RenderSegmentJSON renders a segment
// row's "values": NULL as null, integers and floats as numbers (non-finite
// floats as null), booleans, strings and blob_ref values as strings, json
// values embedded verbatim, bytes and crdt values as standard base64.
func RenderRowJSON(cols []Column, row Row) ([]byte, error) {
	return renderRowValues(nil, cols, row)
}

// ParseRowJSON parses a RenderRowJSON object back into a Row of cols (the
// inverse of RenderRowJSON): every column must be present (null for
// NULL), no other key may be, and each value must have its column type's
// JSON form. json values are re-serialized compactly. where names the
// object in error messages. The row is not checked against nullability or
// ranges: RowCodec.Append does that when it is encoded.
func ParseRowJSON(where string, cols []Column, b []byte) (Row, error) {
	return parseRowValues(where, cols, b)
}
