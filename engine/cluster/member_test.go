package cluster

import "testing"

func TestViewHas(t *testing.T) {
	v := View{Members: []Member{{ID: "http://a:1"}, {ID: "http://b:1"}, {ID: "http://c:1"}}}
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{"http://a:1", true},
		{"http://b:1", true},
		{"http://c:1", true},
		{"http://b:2", false},
		{"", false},
		{"http://d:1", false},
	} {
		if got := v.Has(tc.id); got != tc.want {
			t.Errorf("Has(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
	if (View{}).Has("http://a:1") {
		t.Error("an empty view has a member")
	}
}
