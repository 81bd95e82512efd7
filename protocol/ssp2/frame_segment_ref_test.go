package ssp2

import "testing"

func TestFrameSegmentRef(t *testing.T) {
	next, url, expires := "c2", "https://x/seg-1", int64(1700000060000)
	checkFrame(t, "SEGMENT_REF",
		frameCase{name: "signed url", at: 2, frames: []Frame{exRespHeader, exSubStart, &SegmentRef{SegmentID: "seg-1", MediaType: MediaRows, Table: "todos",
			ByteLength: 1024, RowCount: 10, AsOfCommitSeq: 12, ScopeDigest: "d1", NextRowCursor: &next, URL: &url, URLExpiresAtMs: &expires}, exSubEnd},
			payload: cat(s("seg-1"), []byte{1}, s("todos"), i64(1024), i64(10), i64(12), s("d1"),
				[]byte{0}, []byte{1}, s("c2"), []byte{1}, s("https://x/seg-1"), []byte{1}, i64(1700000060000)),
			json: `{"type":"SEGMENT_REF","segmentId":"seg-1","mediaType":"rows","table":"todos","byteLength":1024,"rowCount":10,"asOfCommitSeq":12,` +
				`"scopeDigest":"d1","nextRowCursor":"c2","url":"https://x/seg-1","urlExpiresAtMs":1700000060000}`},
	)
	checkRefusals(t,
		frameRefusal{name: "url without expiry", kind: KindResponse, frames: []Frame{exRespHeader, exSubStart, &SegmentRef{SegmentID: "s", MediaType: MediaRows, URL: &url}, exSubEnd},
			want: "urlExpiresAtMs must be present iff url is"},
		frameRefusal{name: "unknown media type", kind: KindResponse, frames: []Frame{exRespHeader, exSubStart, &SegmentRef{SegmentID: "s", MediaType: 3}, exSubEnd}, want: "mediaType 3"},
		frameRefusal{name: "after a commit", kind: KindResponse, frames: []Frame{exRespHeader, exSubStart, &Commit{}, &SegmentRef{SegmentID: "s", MediaType: MediaRows}, exSubEnd},
			want: "COMMIT and segment frames mixed in one section"},
	)
}
