package ssp2

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"testing"
	"testing/iotest"
)

// streamDecode reads every frame of in through a Decoder.
func streamDecode(r io.Reader, want MsgKind, maxFrame int) ([]Frame, error) {
	d := NewDecoder(r, want, maxFrame)
	var out []Frame
	for {
		f, err := d.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, f)
	}
}

// checkDecoderMatches: the Decoder accepts exactly what Decode accepts,
// with the same frames, also when the reader hands out one byte at a time.
func checkDecoderMatches(t *testing.T, in []byte, want MsgKind) {
	t.Helper()
	var m *Message
	var err error
	switch want {
	case KindRequest:
		m, err = DecodeRequest(in)
	case KindResponse:
		m, err = DecodeResponse(in)
	default:
		m, err = Decode(in)
	}
	for _, r := range []io.Reader{bytes.NewReader(in), iotest.OneByteReader(bytes.NewReader(in))} {
		got, serr := streamDecode(r, want, 0)
		if (err == nil) != (serr == nil) {
			t.Fatalf("Decode error %v, Decoder error %v", err, serr)
		}
		if err == nil && !reflect.DeepEqual(got, m.Frames) && !(len(got) == 0 && len(m.Frames) == 0) {
			t.Fatalf("Decoder frames differ from Decode's:\n%#v\n%#v", got, m.Frames)
		}
	}
	// With DecodeSegments: the same errors and frames, each inline
	// segment carrying what DecodeSegment makes of its payload.
	d := NewDecoder(bytes.NewReader(in), want, 0)
	d.DecodeSegments()
	var got []Frame
	var serr error
	for {
		f, e := d.Next()
		if errors.Is(e, io.EOF) {
			break
		}
		if e != nil {
			serr = e
			break
		}
		got = append(got, f)
	}
	if (err == nil) != (serr == nil) {
		t.Fatalf("Decode error %v, Decoder (DecodeSegments) error %v", err, serr)
	}
	if err != nil {
		return
	}
	if len(got) != len(m.Frames) {
		t.Fatalf("DecodeSegments: %d frames, Decode %d", len(got), len(m.Frames))
	}
	for i, f := range got {
		si, ok := f.(*SegmentInline)
		if !ok {
			if !reflect.DeepEqual(f, m.Frames[i]) {
				t.Fatalf("DecodeSegments frame %d differs:\n%#v\n%#v", i, f, m.Frames[i])
			}
			continue
		}
		want, derr := DecodeSegment(si.Payload)
		if derr != nil || si.Segment == nil || !reflect.DeepEqual(si.Segment, want) || !bytes.Equal(si.Payload, m.Frames[i].(*SegmentInline).Payload) {
			t.Fatalf("DecodeSegments frame %d: segment %#v (DecodeSegment: %#v, %v)", i, si.Segment, want, derr)
		}
	}
}

// testSegment is a valid SSG2 segment of n rows in blocks of
// SegmentBlockRows.
func testSegment(t *testing.T, n int) []byte {
	t.Helper()
	sb := NewSegmentBuilder("t", 1, []Column{{Name: "id", Type: TypeString}, {Name: "n", Type: TypeInteger, Nullable: true}, {Name: "j", Type: TypeJSON, Nullable: true}})
	for i := 0; i < n; i++ {
		var j any
		if i%3 == 0 {
			j = json.RawMessage(`{"k":1}`)
		}
		if err := sb.AddRow(int64(i+1), Row{"r" + strconv.Itoa(i), int64(i), j}); err != nil {
			t.Fatal(err)
		}
	}
	return sb.Finish()
}

func TestDecoderMatchesDecode(t *testing.T) {
	seg := testSegment(t, SegmentBlockRows+5)
	cases := map[string][]byte{
		"inline segment of two blocks": rawMsg(1, KindResponse, respHdrV1, subStart, frm(FrameSegmentInline, seg), subEnd),
		"bad inline segment":           rawMsg(1, KindResponse, respHdrV1, subStart, frm(FrameSegmentInline, seg[:len(seg)-3]), subEnd),
		"response with a section":      rawMsg(1, KindResponse, respHdrV1, subStart, frm(0x17, []byte{1}), subEnd),
		"push result":                  rawMsg(1, KindResponse, respHdrV1, frm(FramePushResult, cat(s("c1"), []byte{3, 0}, u32(0)))),
		"request":                      rawMsg(1, KindRequest, reqHdrV1, pullHdr3, subFrame(u32(0), i64(1))),
		"no END":                       rawMsg(1, KindResponse, respHdrV1)[:HeaderSize+5],
		"bytes after END":              append(rawMsg(1, KindResponse, respHdrV1), 0),
		"bad magic":                    append([]byte("XXXX"), rawMsg(1, KindResponse, respHdrV1)[4:]...),
		"empty":                        nil,
		"END with a length":            append(rawMsg(1, KindResponse, respHdrV1)[:HeaderSize+5+len(respHdrV1)-5], 0, 1, 0, 0, 0),
		"open section at END":          rawMsg(1, KindResponse, respHdrV1, subStart),
		"frame longer than the input":  append(rawMsg(1, KindResponse)[:HeaderSize], byte(FrameRespHeader), 0xff, 0xff, 0, 0),
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			checkDecoderMatches(t, in, KindResponse)
			checkDecoderMatches(t, in, 0)
		})
	}
}

func TestDecoderFrameLimit(t *testing.T) {
	in := rawMsg(1, KindResponse, respHdrV1, subStart, frm(FrameSegmentInline, make([]byte, 100)), subEnd)
	_, err := streamDecode(bytes.NewReader(in), KindResponse, 99)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a 100-byte frame with a 99-byte limit: %v, want ErrTooLarge", err)
	}
	d := NewDecoder(bytes.NewReader(in), KindResponse, 0)
	if _, err := d.Next(); err != nil {
		t.Fatal(err)
	}
	if d.WireVersion() != 1 {
		t.Fatalf("WireVersion = %d", d.WireVersion())
	}
}

// TestDecoderReadError: a reader's failure surfaces wrapped and sticks.
func TestDecoderReadError(t *testing.T) {
	boom := errors.New("connection reset")
	in := rawMsg(1, KindResponse, respHdrV1, subStart, subEnd)
	d := NewDecoder(io.MultiReader(bytes.NewReader(in[:HeaderSize+3]), iotest.ErrReader(boom)), KindResponse, 0)
	var err error
	for err == nil {
		_, err = d.Next()
	}
	if !errors.Is(err, boom) {
		t.Fatalf("Next = %v, want the reader's error", err)
	}
	if _, again := d.Next(); !errors.Is(again, boom) {
		t.Fatalf("second Next = %v, want the same error", again)
	}
}

func FuzzDecoder(f *testing.F) {
	addVectorSeeds(f, "response")
	addVectorSeeds(f, "request")
	f.Add(rawMsg(1, KindResponse, respHdrV1, subStart, frm(0x17, []byte{1}), subEnd))
	f.Fuzz(func(t *testing.T, in []byte) {
		checkDecoderMatches(t, in, 0)
	})
}
