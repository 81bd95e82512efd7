package storage

import (
	"errors"
	"slices"
	"testing"
)

func TestColumnVersions(t *testing.T) {
	cases := []struct {
		name    string
		cv      ColumnVersions
		version int64
		want    []int64
	}{
		{"legacy row: every column at server_version", nil, 7, []int64{7, 7, 7, 7}},
		{"inserted", InsertedColumnVersions(), 1, []int64{1, 1, 1, 1}},
		{"updated columns", EncodeColumnVersions([]int64{1, 5, 1, 9}, 9), 9, []int64{1, 5, 1, 9}},
		{"large versions", EncodeColumnVersions([]int64{1, 300, 1, 70000}, 70000), 70000, []int64{1, 300, 1, 70000}},
		{"rewritten by a writer without versions", EncodeColumnVersions([]int64{1, 5, 1, 9}, 9), 10, []int64{10, 10, 10, 10}},
		{"inserted, then rewritten", InsertedColumnVersions(), 2, []int64{2, 2, 2, 2}},
	}
	for _, c := range cases {
		got, err := c.cv.Decode(4, c.version)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: Decode = %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	if got := InsertedColumnVersions(); len(got) != 2 || got.Legacy() {
		t.Fatalf("InsertedColumnVersions = %x", got)
	}
	bad := map[string]ColumnVersions{
		"empty":                   {},
		"format byte":             {0x02, 0x01},
		"no stamp":                {0x01},
		"stamp 0":                 {0x01, 0x00},
		"truncated ordinal":       {0x01, 0x05, 0x80},
		"truncated version":       {0x01, 0x05, 0x01},
		"ordinal out of range":    {0x01, 0x05, 0x04, 0x02},
		"ordinals out of order":   {0x01, 0x05, 0x02, 0x02, 0x01, 0x02},
		"version 1 listed":        {0x01, 0x05, 0x01, 0x01},
		"version above its stamp": {0x01, 0x05, 0x01, 0x06},
	}
	for name, cv := range bad {
		if _, err := cv.Decode(4, 5); !errors.Is(err, ErrBadColumnVersions) {
			t.Errorf("%s: Decode(%x) = %v, want ErrBadColumnVersions", name, cv, err)
		}
	}
}

func FuzzColumnVersions(f *testing.F) {
	f.Add([]byte{0x01, 0x01}, int64(1))
	f.Add([]byte(EncodeColumnVersions([]int64{1, 4, 3}, 4)), int64(4))
	f.Fuzz(func(t *testing.T, b []byte, version int64) {
		if version < 1 {
			return
		}
		got, err := ColumnVersions(b).Decode(3, version)
		if err != nil {
			return
		}
		for _, v := range got {
			if v < 1 || v > version {
				t.Fatalf("Decode(%x, %d) = %v: a version outside 1..%d", b, version, got, version)
			}
		}
	})
}
