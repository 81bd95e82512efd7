package opwire

import (
	"bytes"
	"math"
	"reflect"
	"testing"

	"github.com/synclane/synclane/protocol/syncerr"
)

func TestRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		v    any
		wire string
	}{
		{"null", nil, `{"t":"null"}`},
		{"bool", true, `{"t":"boolean","v":true}`},
		{"number", 1.5, `{"t":"number","v":1.5}`},
		{"string", "x", `{"t":"string","v":"x"}`},
		{"integer", int64(-42), `{"t":"integer","v":"-42"}`},
		{"max integer", int64(math.MaxInt64), `{"t":"integer","v":"9223372036854775807"}`},
		{"bytes", []byte{0, 1}, `{"t":"bytes","v":"AAE="}`},
		{"array", []any{"a", int64(1)}, `{"t":"array","v":[{"t":"string","v":"a"},{"t":"integer","v":"1"}]}`},
		{"object keeps order", Object{{"b", nil}, {"a", false}}, `{"t":"object","v":[["b",{"t":"null"}],["a",{"t":"boolean","v":false}]]}`},
		{"empty object", Object{}, `{"t":"object","v":[]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := Encode(c.v)
			if err != nil || string(b) != c.wire {
				t.Fatalf("Encode = %s, %v; want %s", b, err, c.wire)
			}
			got, err := Decode(b)
			if err != nil || !reflect.DeepEqual(got, c.v) {
				t.Fatalf("Decode = %#v, %v; want %#v", got, err, c.v)
			}
		})
	}
}

func TestDecodeRefuses(t *testing.T) {
	for _, in := range []string{
		``, `null`, `[]`, `{"t":"null","v":1}`, `{"t":"nope","v":1}`, `{"v":1}`,
		`{"t":"boolean"}`, `{"t":"boolean","v":1}`, `{"t":"number","v":"1"}`, `{"t":"number","v":1e999}`,
		`{"t":"integer","v":42}`, `{"t":"integer","v":"042"}`, `{"t":"integer","v":"-0"}`, `{"t":"integer","v":"+1"}`,
		`{"t":"integer","v":"9223372036854775808"}`, `{"t":"integer","v":""}`, `{"t":"integer","v":"1.0"}`,
		`{"t":"bytes","v":"AAE"}`, `{"t":"bytes","v":"AAF="}`, `{"t":"bytes","v":"A A="}`,
		`{"t":"object","v":[["a",{"t":"null"}],["a",{"t":"null"}]]}`, `{"t":"object","v":[["a"]]}`,
		`{"t":"object","v":[[1,{"t":"null"}]]}`, `{"t":"array","v":{}}`, `{"t":"string","v":"x"} {}`,
		`{"t":"string","v":"x","w":1}`, "{\"t\":\"string\",\"v\":\"\xff\"}",
		deep(MaxDepth + 1),
	} {
		if _, err := Decode([]byte(in)); syncerr.CodeOf(err) != syncerr.OperationInvalidRequest {
			t.Errorf("Decode(%.60q) = %v, want operation.invalid_request", in, err)
		}
	}
	if _, err := Decode([]byte(deep(MaxDepth))); err != nil {
		t.Errorf("depth %d refused: %v", MaxDepth, err)
	}
}

func deep(n int) string {
	s := `{"t":"null"}`
	for i := 1; i < n; i++ {
		s = `{"t":"array","v":[` + s + `]}`
	}
	return s
}

func req(fields Object) []byte {
	b, err := Encode(fields)
	if err != nil {
		panic(err)
	}
	return b
}

func TestDecodeRequest(t *testing.T) {
	base := func(kind string, extra ...Field) Object {
		return append(Object{{"revision", 1.0}, {"kind", kind}, {"clientId", "c"}, {"operationId", "op"}}, extra...)
	}
	cases := []struct {
		name string
		in   Object
		want *Request
	}{
		{"query", base("query", Field{"params", Object{{"p", "a"}}}), &Request{Kind: "query", ClientID: "c", OperationID: "op", Params: Object{{"p", "a"}}}},
		{"query without params", base("query"), &Request{Kind: "query", ClientID: "c", OperationID: "op"}},
		{"command", base("command", Field{"requestId", "r1"}), &Request{Kind: "command", ClientID: "c", OperationID: "op", RequestID: "r1"}},
		{"integer revision", append(Object{{"revision", int64(1)}}, base("query")[1:]...), &Request{Kind: "query", ClientID: "c", OperationID: "op"}},
		{"command without requestId", base("command"), nil},
		{"command with empty requestId", base("command", Field{"requestId", ""}), nil},
		{"query with requestId", base("query", Field{"requestId", "r"}), nil},
		{"unknown field", base("query", Field{"x", 1.0}), nil},
		{"revision 2", append(Object{{"revision", 2.0}}, base("query")[1:]...), nil},
		{"kind error", base("error"), nil},
		{"clientId not a string", Object{{"revision", 1.0}, {"kind", "query"}, {"clientId", int64(1)}, {"operationId", "op"}}, nil},
		{"no operationId", Object{{"revision", 1.0}, {"kind", "query"}, {"clientId", "c"}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := DecodeRequest(req(c.in))
			if c.want == nil {
				if syncerr.CodeOf(err) != syncerr.OperationInvalidRequest {
					t.Fatalf("err = %v, want operation.invalid_request", err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
	if _, err := DecodeRequest([]byte(`{"t":"string","v":"x"}`)); syncerr.CodeOf(err) != syncerr.OperationInvalidRequest {
		t.Fatalf("non-object request: %v", err)
	}
}

func TestResponses(t *testing.T) {
	q, err := (&QueryResult{OperationID: "q", Rows: []Object{{{"id", "a"}, {"n", int64(2)}}}, MaxCommitSeq: 7}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"t":"object","v":[["revision",{"t":"number","v":1}],["kind",{"t":"string","v":"query"}],["operationId",{"t":"string","v":"q"}],["rows",{"t":"array","v":[{"t":"object","v":[["id",{"t":"string","v":"a"}],["n",{"t":"integer","v":"2"}]]}]}],["maxCommitSeq",{"t":"number","v":7}]]}`
	if string(q) != want {
		t.Fatalf("query response\n got %s\nwant %s", q, want)
	}
	if _, err := (&QueryResult{MaxCommitSeq: MaxSafeInteger + 1}).Encode(); err == nil {
		t.Fatal("unsafe maxCommitSeq encoded")
	}
	c, err := (&CommandResult{OperationID: "c", RequestID: "r", Status: StatusRejected}).Encode()
	if err != nil || bytes.Contains(c, []byte("commitSeq")) || !bytes.Contains(c, []byte(`["results",{"t":"array","v":[]}]`)) {
		t.Fatalf("rejected command response %s, %v", c, err)
	}
	e := EncodeError(syncerr.New(syncerr.OperationForbidden, "no"))
	v, err := Decode(e)
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := v.(Object).Get("code"); code != "operation.forbidden" {
		t.Fatalf("error response %s", e)
	}
	if r, _ := v.(Object).Get("retryable"); r != false {
		t.Fatalf("retryable = %v", r)
	}
}

func TestEncodeRefuses(t *testing.T) {
	for _, v := range []any{math.NaN(), math.Inf(1), struct{}{}, []any{make(chan int)}} {
		if _, err := Encode(v); err == nil {
			t.Errorf("Encode(%T) succeeded", v)
		}
	}
}

// FuzzDecode: the decoder never panics, refuses with
// operation.invalid_request, and whatever it accepts re-encodes to a
// value that decodes to the same thing.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"t":"null"}`, `{"t":"object","v":[["a",{"t":"integer","v":"1"}]]}`,
		`{"t":"array","v":[{"t":"bytes","v":"AAE="},{"t":"number","v":-0.5}]}`, deep(10), `{"t":"string","v":"\u00e9"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Decode(data)
		if err != nil {
			if syncerr.CodeOf(err) != syncerr.OperationInvalidRequest {
				t.Fatalf("error without operation.invalid_request: %v", err)
			}
			return
		}
		b, err := Encode(v)
		if err != nil {
			t.Fatalf("decoded value does not encode: %#v: %v", v, err)
		}
		w, err := Decode(b)
		if err != nil || !reflect.DeepEqual(v, w) {
			t.Fatalf("round trip changed %#v into %#v (%v)", v, w, err)
		}
		_, _ = DecodeRequest(data)
		if m, err := DecodeWatchMessage(data); err == nil && m.WatchID == "" {
			t.Fatalf("watch message without a watchId accepted")
		}
	})
}

func TestDecodeWatchMessage(t *testing.T) {
	base := Object{{"revision", 1.0}, {"kind", "watch"}, {"watchId", "w"}, {"clientId", "c"}, {"operationId", "q"}}
	m, err := DecodeWatchMessage(req(append(base, Field{"params", "p"})))
	if err != nil || *m != (WatchMessage{Kind: "watch", WatchID: "w", ClientID: "c", OperationID: "q", Params: "p"}) {
		t.Fatalf("watch: %+v %v", m, err)
	}
	if m, err := DecodeWatchMessage(req(Object{{"revision", 1.0}, {"kind", "unwatch"}, {"watchId", "w"}})); err != nil || m.Kind != KindUnwatch {
		t.Fatalf("unwatch: %+v %v", m, err)
	}
	for name, o := range map[string]Object{
		"empty watchId":       {{"revision", 1.0}, {"kind", "unwatch"}, {"watchId", ""}},
		"unwatch with params": {{"revision", 1.0}, {"kind", "unwatch"}, {"watchId", "w"}, {"params", nil}},
		"watch without op":    {{"revision", 1.0}, {"kind", "watch"}, {"watchId", "w"}, {"clientId", "c"}},
		"kind query":          {{"revision", 1.0}, {"kind", "query"}, {"watchId", "w"}},
		"revision 2":          {{"revision", 2.0}, {"kind", "unwatch"}, {"watchId", "w"}},
	} {
		if _, err := DecodeWatchMessage(req(o)); syncerr.CodeOf(err) != syncerr.OperationInvalidRequest {
			t.Errorf("%s: %v", name, err)
		}
	}
}
