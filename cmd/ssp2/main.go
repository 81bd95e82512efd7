// Command ssp2 is an operator debugging tool for the SSP2 wire codec.
//
//	ssp2 decode [--kind request|response|segment] [--schema FILE] FILE|-
//	    prints the canonical §11 JSON rendering (indented); the kind comes
//	    from the envelope header (magic SSP2) or the segment header (magic
//	    SSG2) unless given.
//	ssp2 encode [--kind request|response|segment] [--schema FILE] FILE|-
//	    reads a rendering and writes canonical bytes to stdout; the kind
//	    comes from the rendering's "magic" unless given.
//
// Both handle every wire version the codec knows (ssp2.KnownWireVersions:
// 1, 2 and 3): decode takes it from the envelope header, encode from the
// rendering's "wireVersion", and the layouts follow it.
//
// With --schema (a synclane schema file), decode shows the rows of
// PUSH_COMMIT operations and COMMIT changes as "values": {column: value}
// in place of their base64 row bytes, and each SEGMENT_INLINE's segment
// rendered in place of its base64 payload; encode takes that form back
// and writes the row bytes with the schema's column types (protocol/rowjson).
// From wire version 3 on a push payload is a sparse row (SPEC §2.4): its
// "values" hold the columns the operation writes and no others (an absent
// column has no key, a present NULL is null; the primary key is always
// there); before version 3 they hold every column. A conflict record's
// "serverRow" stays base64, and its "conflictColumns" (version 3) too.
//
// Invalid input exits 1 with the error code and message on stderr; usage
// errors exit 2; ssp2 -h prints the usage and exits 0. A server's JSON
// error body given to decode (what curl prints for a refused request) is
// shown as such, indented on stdout with a note on stderr, and exits 1.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/synclane/synclane/protocol/rowjson"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

const usage = `usage: ssp2 decode|encode [--kind request|response|segment] [--schema FILE] FILE|-

  decode  reads SSP2 bytes (FILE, or - for stdin) and prints the canonical JSON
          rendering; the kind comes from the envelope or, for an SSG2 rows
          segment, from its header, unless given. A JSON error body from the
          server is printed as such and exits 1.
  encode  reads a JSON rendering and writes the canonical bytes to stdout; the
          kind comes from its "magic" unless given.
  Wire versions 1, 2 and 3: decode reads the envelope's, encode writes the
  rendering's "wireVersion".

  --schema FILE  a synclane schema file: decode shows the rows of PUSH_COMMIT
          operations and COMMIT changes as "values" (JSON per column) instead
          of base64 "payload"/"row", and SEGMENT_INLINE as "segment" (the
          segment's rendering) instead of base64 "payload"; a row it cannot
          read with the schema stays base64, with a note on stderr. encode
          takes either form and writes the rows with the schema's column types.
          At wire version 3 a push's "values" name only the columns it
          writes (the primary key always; null is a present NULL, a missing
          key an untouched column); before, every column.

Examples:
  go run ./cmd/ssp2 encode examples/curl/pull.json > pull.bin
  curl -sS ... --data-binary @pull.bin http://127.0.0.1:8787/sync | go run ./cmd/ssp2 decode -
  go run ./cmd/ssp2 encode --schema examples/curl/schema.json examples/curl/push.json > push.bin
  curl -sS ... | go run ./cmd/ssp2 decode --schema examples/curl/schema.json -
`

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) < 1 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd := args[0]
	switch cmd {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fs := flag.NewFlagSet("ssp2 "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	kind := fs.String("kind", "", "request, response or segment")
	schemaFile := fs.String("schema", "", "schema file: show rows as JSON values per column (decode), take them (encode)")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 || (cmd != "decode" && cmd != "encode") {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch *kind {
	case "", "request", "response", "segment":
	default:
		fmt.Fprintf(stderr, "ssp2: unknown --kind %q\n", *kind)
		return 2
	}
	var rows *rowView
	if *schemaFile != "" {
		sch, err := loadSchema(*schemaFile)
		if err != nil {
			fmt.Fprintf(stderr, "ssp2: %v\n", err)
			return 2
		}
		rows = &rowView{schema: sch, note: func(msg string) { fmt.Fprintf(stderr, "ssp2: note: %s; left as base64\n", msg) }}
	}
	in, err := readInput(fs.Arg(0), stdin)
	if err != nil {
		fmt.Fprintf(stderr, "ssp2: %v\n", err)
		return 1
	}
	var out []byte
	if cmd == "decode" && looksLikeJSON(in) {
		return jsonErrorBody(in, stdout, stderr)
	}
	if cmd == "decode" {
		out, err = decodeRows(*kind, in, rows)
	} else {
		out, err = encodeRows(*kind, in, rows)
	}
	if err != nil {
		reportError(stderr, err)
		return 1
	}
	if _, err := stdout.Write(out); err != nil {
		fmt.Fprintf(stderr, "ssp2: write: %v\n", err)
		return 1
	}
	return 0
}

// looksLikeJSON reports whether in is a JSON object rather than SSP2
// bytes (which start with the magic "SSP2" or "SSG2").
func looksLikeJSON(in []byte) bool {
	t := bytes.TrimLeft(in, " \t\r\n")
	return len(t) > 0 && t[0] == '{'
}

// jsonErrorBody reports a JSON body given to decode: the server answered a
// request with its JSON error (HTTP 4xx/5xx) instead of SSP2 bytes.
func jsonErrorBody(in []byte, stdout, stderr io.Writer) int {
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(in, &e) != nil {
		fmt.Fprintln(stderr, "ssp2: input starts with '{' but is neither SSP2 bytes nor valid JSON")
		return 1
	}
	var buf bytes.Buffer
	if json.Indent(&buf, bytes.TrimSpace(in), "", "  ") == nil {
		buf.WriteByte('\n')
		_, _ = stdout.Write(buf.Bytes())
	}
	if e.Code != "" {
		fmt.Fprintf(stderr, "ssp2: input is a JSON error body, not SSP2 bytes: the server refused the request: %s: %s\n", e.Code, e.Message)
	} else {
		fmt.Fprintln(stderr, "ssp2: input is JSON, not SSP2 bytes (to turn a JSON rendering into bytes, use ssp2 encode)")
	}
	return 1
}

func readInput(name string, stdin io.Reader) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(name)
}

func reportError(w io.Writer, err error) {
	var se *syncerr.Error
	if errors.As(err, &se) {
		msg := se.Message
		if se.Err != nil {
			msg += ": " + se.Err.Error()
		}
		fmt.Fprintf(w, "%s: %s\n", se.Code, msg)
		return
	}
	fmt.Fprintf(w, "error: %v\n", err)
}

// decode is decodeRows without a schema.
func decode(kind string, in []byte) ([]byte, error) { return decodeRows(kind, in, nil) }

// decodeRows decodes in as kind ("" for the kind its magic names) and
// returns the indented rendering, its rows shown per column when rows is
// set.
func decodeRows(kind string, in []byte, rows *rowView) ([]byte, error) {
	if kind == "" && bytes.HasPrefix(in, []byte(ssp2.SegmentMagic)) {
		kind = "segment"
	}
	var rendering []byte
	var err error
	switch kind {
	case "segment":
		var s *ssp2.Segment
		if s, err = ssp2.DecodeSegment(in); err == nil {
			if rows != nil {
				if n := rowjson.CheckSegment(rows.schema, s); n != "" {
					rows.note(n)
				}
			}
			rendering, err = ssp2.RenderSegmentJSON(s)
		}
	default:
		var m *ssp2.Message
		switch kind {
		case "request":
			m, err = ssp2.DecodeRequest(in)
		case "response":
			m, err = ssp2.DecodeResponse(in)
		default:
			m, err = ssp2.Decode(in)
		}
		if err == nil {
			rendering, err = ssp2.RenderJSON(m)
		}
		if err == nil && rows != nil {
			rendering, err = rowjson.Expand(rendering, rows.schema, rows.note)
		}
	}
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, rendering, "", "  "); err != nil {
		return nil, err
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

// encode is encodeRows without a schema.
func encode(kind string, in []byte) ([]byte, error) { return encodeRows(kind, in, nil) }

// encodeRows encodes the rendering in as kind ("" for the kind its
// "magic" names), taking rows given per column when rows is set.
func encodeRows(kind string, in []byte, rows *rowView) ([]byte, error) {
	if kind == "" {
		var head struct {
			Magic string `json:"magic"`
		}
		if json.Unmarshal(in, &head) == nil && head.Magic == ssp2.SegmentMagic {
			kind = "segment"
		}
	}
	if kind == "segment" {
		s, err := ssp2.ParseSegmentJSON(in)
		if err != nil {
			return nil, err
		}
		return ssp2.EncodeSegment(s)
	}
	if rows != nil {
		var err error
		if in, err = rowjson.Collapse(in, rows.schema); err != nil {
			return nil, err
		}
	}
	m, err := ssp2.ParseJSON(in)
	if err != nil {
		return nil, err
	}
	if kind == "request" && m.Kind != ssp2.KindRequest || kind == "response" && m.Kind != ssp2.KindResponse {
		return nil, fmt.Errorf("rendering is a %v message, not a %s", m.Kind, kind)
	}
	return ssp2.Encode(m)
}
