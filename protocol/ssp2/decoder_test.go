package ssp2

import (
	"bytes"
	"errors"
	"io"
	"reflect"
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
}

func TestDecoderMatchesDecode(t *testing.T) {
	cases := map[string][]byte{
		"response with a section":     rawMsg(1, KindResponse, respHdrV1, subStart, frm(0x17, []byte{1}), subEnd),
		"push result":                 rawMsg(1, KindResponse, respHdrV1, frm(FramePushResult, cat(s("c1"), []byte{3, 0}, u32(0)))),
		"request":                     rawMsg(1, KindRequest, reqHdrV1, pullHdr3, subFrame(u32(0), i64(1))),
		"no END":                      rawMsg(1, KindResponse, respHdrV1)[:HeaderSize+5],
		"bytes after END":             append(rawMsg(1, KindResponse, respHdrV1), 0),
		"bad magic":                   append([]byte("XXXX"), rawMsg(1, KindResponse, respHdrV1)[4:]...),
		"empty":                       nil,
		"END with a length":           append(rawMsg(1, KindResponse, respHdrV1)[:HeaderSize+5+len(respHdrV1)-5], 0, 1, 0, 0, 0),
		"open section at END":         rawMsg(1, KindResponse, respHdrV1, subStart),
		"frame longer than the input": append(rawMsg(1, KindResponse)[:HeaderSize], byte(FrameRespHeader), 0xff, 0xff, 0, 0),
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
