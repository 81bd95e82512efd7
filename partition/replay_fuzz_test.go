package partition

import (
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// FuzzReplay feeds arbitrary stored idempotency results (the decoder of
// the persisted outcome, details included) to replay: it never panics, a
// rejected replay carries exactly one record, and details appear only on
// rejections.
func FuzzReplay(f *testing.F) {
	f.Add([]byte(`{"n":2}`), uint8(ssp2.CommitApplied))
	f.Add(encodeRejected(&ssp2.OpResult{OpIndex: 1, Status: ssp2.OpError, Code: "app.x", Message: "m"}, `{"reason":"r"}`), uint8(ssp2.CommitRejected))
	f.Add([]byte(`{"rej":{"i":0,"s":3,"c":"x","m":"y","d":"{}"}}`), uint8(ssp2.CommitRejected))
	f.Add([]byte("\x00garbage"), uint8(ssp2.CommitApplied))
	f.Fuzz(func(t *testing.T, result []byte, status uint8) {
		o := replay(&storage.IdempotencyRecord{ClientID: "c", ClientCommitID: "k", Status: ssp2.CommitStatus(status), CommitSeq: 7, Result: result}, 3)
		if o.pr == nil {
			t.Fatal("no result")
		}
		if o.pr.Status == ssp2.CommitRejected && len(o.pr.Results) != 1 {
			t.Fatalf("rejected replay with %d records", len(o.pr.Results))
		}
		if o.details != "" && o.pr.Status != ssp2.CommitRejected {
			t.Fatalf("details on a %v replay", o.pr.Status)
		}
		if o.details != "" && ssp2.CheckDetailsJSON(o.details) != nil {
			t.Fatalf("replayed invalid details %q", o.details)
		}
	})
}
