package yjs

import "testing"

// BenchmarkMerge merges one small update into stored documents of growing
// size (the vectors' histories merged together): the cost of a push to a
// crdt column is a decode and re-encode of the stored document.
func BenchmarkMerge(b *testing.B) {
	vs := loadVectors(b)
	small := vs[0].updates(b)[0]
	for _, n := range []int{1, 10, 40} {
		var all [][]byte
		for _, v := range vs[:n] {
			all = append(all, v.updates(b)...)
		}
		stored, err := MergeUpdates(all...)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("stored="+itoa(len(stored)), func(b *testing.B) {
			b.SetBytes(int64(len(stored)))
			for b.Loop() {
				if _, err := (Merger{}).Merge(stored, small); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func itoa(n int) string {
	if n < 1024 {
		return string(rune('0'+n/100%10)) + string(rune('0'+n/10%10)) + string(rune('0'+n%10)) + "B"
	}
	return string(rune('0'+n/1024/10%10)) + string(rune('0'+n/1024%10)) + "KiB"
}
