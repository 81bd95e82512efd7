package cluster

import (
	"fmt"
	"testing"
)

func view(ids ...string) View {
	v := View{Healthy: true}
	for _, id := range ids {
		v.Members = append(v.Members, Member{ID: id})
	}
	return v
}

func TestOwnerEmptyView(t *testing.T) {
	if _, ok := Owner(View{}, "p"); ok {
		t.Fatal("an empty view has no owner")
	}
}

func TestOwnerIsOrderIndependent(t *testing.T) {
	a := view("http://a:1", "http://b:1", "http://c:1")
	b := view("http://c:1", "http://a:1", "http://b:1")
	for i := range 1000 {
		p := fmt.Sprintf("part-%d", i)
		x, _ := Owner(a, p)
		y, _ := Owner(b, p)
		if x.ID != y.ID {
			t.Fatalf("%s: owner %s vs %s depending on member order", p, x.ID, y.ID)
		}
	}
}

// Placement spreads partitions evenly and moves only the leaving member's
// partitions when one leaves.
func TestOwnerBalanceAndMinimalMoves(t *testing.T) {
	ids := []string{"http://127.0.0.1:7001", "http://127.0.0.1:7002", "http://127.0.0.1:7003"}
	three, two := view(ids...), view(ids[0], ids[1])
	const n = 30000
	count := map[string]int{}
	moved := 0
	for i := range n {
		p := fmt.Sprintf("tenant-%d", i)
		o3, _ := Owner(three, p)
		o2, _ := Owner(two, p)
		count[o3.ID]++
		if o3.ID != ids[2] && o3.ID != o2.ID {
			moved++
		}
	}
	for _, id := range ids {
		if c := count[id]; c < n/3*9/10 || c > n/3*11/10 {
			t.Errorf("%s owns %d of %d partitions, want within 10%% of %d", id, c, n, n/3)
		}
	}
	if moved != 0 {
		t.Errorf("%d partitions of the remaining members moved when a third left", moved)
	}
}

func TestScoreDiffers(t *testing.T) {
	if Score("a", "bc") == Score("ab", "c") {
		t.Error("the separator must keep (a, bc) and (ab, c) apart")
	}
}
