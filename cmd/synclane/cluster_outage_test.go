package main

import (
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The coordinator's outages, with real processes: etcd and three members
// on one PostgreSQL under write load (cluster_harness_test.go).

// outagePartitions returns n partition names.
func outagePartitions(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

// longestGap returns, for partition p, the longest time between two
// consecutive acknowledgements answered in [from, to], counting from from
// to the first and from the last to to.
func longestGap(acks []pushAck, p string, from, to time.Time) time.Duration {
	var ats []time.Time
	for _, a := range acks {
		if a.partition == p && !a.at.Before(from) && !a.at.After(to) {
			ats = append(ats, a.at)
		}
	}
	slices.SortFunc(ats, func(a, b time.Time) int { return a.Compare(b) })
	prev, longest := from, time.Duration(0)
	for _, at := range append(ats, to) {
		longest = max(longest, at.Sub(prev))
		prev = at
	}
	return longest
}

// etcd stopped for 20 s under write load on 20 partitions: every partition
// keeps acknowledging pushes throughout (longest gap per partition under
// 1 s), through every member (forwarded calls included); no commit is lost
// or applied twice, seqs stay dense; when etcd is back no partition moves.
func TestClusterServesThroughEtcdOutage(t *testing.T) {
	c := startCluster(t, clusterOptions{leaseTTL: 2 * time.Second})
	parts := outagePartitions("etcd-out-", 20)
	load := startLoad(t, loadConfig{writers: len(parts), partitions: parts,
		targets: func(w int) []*clusterMember { return rotate(c.members, w) }})
	for _, p := range parts {
		load.waitAcks(t, 30*time.Second, "pushes acknowledged on "+p, 5, func(a pushAck) bool { return a.partition == p })
	}
	type row struct {
		owner string
		gen   int64
	}
	before := map[string]row{}
	for _, p := range parts {
		o, g, _ := c.ownerRow(t, p)
		before[p] = row{o, g}
	}

	stopped := time.Now()
	c.etcd.Stop()
	// The outage: long enough for every lease to have lapsed many times
	// over. The load runs meanwhile; the test waits on acknowledgements.
	outage := 20 * time.Second
	load.waitAcks(t, outage+10*time.Second, "the load keeps going through the outage", 1, func(a pushAck) bool {
		return a.at.After(stopped.Add(outage))
	})
	c.etcd.Restart(t)
	back := time.Now()
	c.waitViews(t, c.members...)
	load.waitAcks(t, 30*time.Second, "the load keeps going once etcd is back", 20*len(parts), func(a pushAck) bool { return a.sent.After(back) })
	load.finish()
	end := time.Now()

	acks := load.snapshot()
	worst, worstP := time.Duration(0), ""
	for _, p := range parts {
		if g := longestGap(acks, p, stopped, back); g > worst {
			worst, worstP = g, p
		}
		if g := longestGap(acks, p, stopped, back); g >= time.Second {
			t.Errorf("partition %s: no push acknowledged for %v during the etcd outage (target: under 1s)", p, g.Round(time.Millisecond))
		}
		c.checkLog(t, p, acksFor(acks, p))
	}
	moved := 0
	for _, p := range parts {
		o, g, _ := c.ownerRow(t, p)
		if (row{o, g}) != before[p] {
			moved++
			t.Errorf("partition %s: owner %s generation %d before the outage, %s %d after: etcd's return moved it", p, before[p].owner, before[p].gen, o, g)
		}
	}
	during := 0
	for _, a := range acks {
		if a.at.After(stopped) && a.at.Before(back) {
			during++
		}
	}
	t.Logf("etcd down %v: %d pushes acknowledged meanwhile (%.0f/s), longest gap %v (%s); %d partitions moved after; %d acknowledged in all over %v; %s",
		back.Sub(stopped).Round(time.Millisecond), during, float64(during)/back.Sub(stopped).Seconds(), worst.Round(time.Millisecond), worstP,
		moved, len(acks), end.Sub(stopped).Round(time.Second), load.summary())
	if len(load.failures) > 0 || load.gaveUp > 0 {
		t.Errorf("%d pushes failed, %d gave up: %v", len(load.failures), load.gaveUp, load.failures[:min(len(load.failures), 10)])
	}
}

// etcd reachable by two members and not the third (its etcd endpoint is a
// proxy the test stops): the third's partitions move to the others within
// the lease TTL plus the move timeout, the third's writes are fenced (no
// commit under a stale generation, none lost or twice), and its own
// clients keep being served (by the owner the database records).
func TestClusterMemberCutOffFromEtcd(t *testing.T) {
	var proxy *tcpProxy
	c := startCluster(t, clusterOptions{leaseTTL: 2 * time.Second, etcdVia: func(name, endpoint string) string {
		if name != "C" {
			return endpoint
		}
		if proxy == nil {
			proxy = startTCPProxy(t, endpoint)
		}
		return proxy.endpoint()
	}})
	a, b, cut := c.members[0], c.members[1], c.members[2]
	var parts []string
	for i := range 3 {
		parts = append(parts, c.ownedPartition(t, cut, fmt.Sprintf("cut%d-", i)))
	}
	parts = append(parts, c.ownedPartition(t, a, "cut-a-"), c.ownedPartition(t, b, "cut-b-"))
	load := startLoad(t, loadConfig{writers: 3 * len(parts), partitions: parts, roundRobin: true,
		targets: func(w int) []*clusterMember { return rotate(c.members, w) }})
	for _, p := range parts {
		load.waitAcks(t, 30*time.Second, "pushes acknowledged on "+p, 10, func(a pushAck) bool { return a.partition == p })
	}
	gens := map[string]int64{}
	for _, p := range parts[:3] {
		o, g, _ := c.ownerRow(t, p)
		if o != cut.base {
			t.Fatalf("%s is owned by %q, want %s", p, o, cut.base)
		}
		gens[p] = g
	}

	cutAt := time.Now()
	proxy.cut()
	moveBound := c.opts.leaseTTL + 5*time.Second // lease TTL + the default move timeout
	moved := map[string]time.Duration{}
	waitUntil(t, moveBound+5*time.Second, "the cut-off member's partitions move", func() (bool, string) {
		for _, p := range parts[:3] {
			if _, ok := moved[p]; ok {
				continue
			}
			if o, g, _ := c.ownerRow(t, p); o != cut.base && g > gens[p] {
				moved[p] = time.Since(cutAt)
			}
		}
		return len(moved) == 3, fmt.Sprintf("moved %v", moved)
	})
	// The load keeps going through every member, the cut-off one
	// included, on every partition.
	settled := time.Now()
	for _, m := range c.members {
		load.waitAcks(t, 20*time.Second, "pushes acknowledged through "+m.name+" after the move", 20, func(a pushAck) bool {
			return a.via == m && a.sent.After(settled)
		})
	}
	for _, p := range parts {
		load.waitAcks(t, 20*time.Second, "pushes acknowledged on "+p+" after the move", 5, func(a pushAck) bool {
			return a.partition == p && a.sent.After(settled)
		})
	}
	proxy.restore(t)
	c.waitViews(t, c.members...)
	load.finish()

	acks := load.snapshot()
	for _, p := range parts {
		c.checkLog(t, p, acksFor(acks, p))
	}
	for p, d := range moved {
		if d > moveBound+time.Second {
			t.Errorf("partition %s moved %v after the cut, want within %v (lease TTL + move timeout)", p, d.Round(time.Millisecond), moveBound)
		}
	}
	viaCut := 0
	for _, a := range acks {
		if a.via == cut && a.sent.After(settled) {
			viaCut++
		}
	}
	t.Logf("member %s cut off from etcd: its partitions moved after %v; %d pushes through it acknowledged after the move; %s", cut.name, moved, viaCut, load.summary())
	if len(load.failures) > 0 || load.gaveUp > 0 {
		t.Errorf("%d pushes failed, %d gave up: %v", len(load.failures), load.gaveUp, load.failures[:min(len(load.failures), 10)])
	}
}

// tcpProxy forwards TCP connections from a loopback port to a target;
// cut closes the listener and every connection (the target unreachable),
// restore listens again on the same port.
type tcpProxy struct {
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func startTCPProxy(t *testing.T, endpoint string) *tcpProxy {
	t.Helper()
	target, _ := strings.CutPrefix(endpoint, "http://")
	p := &tcpProxy{target: target, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.cut)
	return p
}

func (p *tcpProxy) endpoint() string { return "http://" + p.addr }

// serve accepts on ln until it is closed (cut).
func (p *tcpProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = in.Close()
				continue
			}
			p.mu.Lock()
			if p.ln != ln {
				p.mu.Unlock()
				_ = in.Close()
				_ = out.Close()
				return
			}
			p.conns[in], p.conns[out] = struct{}{}, struct{}{}
			p.mu.Unlock()
			p.wg.Add(2)
			pipe := func(dst, src net.Conn) {
				defer p.wg.Done()
				_, _ = io.Copy(dst, src)
				_ = dst.Close()
				_ = src.Close()
			}
			go pipe(in, out)
			go pipe(out, in)
		}
	}()
}

// cut closes the listener and every proxied connection, and waits for
// the proxy's goroutines.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}

// restore listens again on the proxy's address.
func (p *tcpProxy) restore(t *testing.T) {
	t.Helper()
	var ln net.Listener
	var err error
	for range 50 { // the port was just closed: retry briefly if it is not free yet
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("proxy: listen again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}
