package peer

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/synclane/synclane/engine"
)

var (
	descMembers       = prometheus.NewDesc("synclane_cluster_members", "Members in this member's view of the cluster.", nil, nil)
	descHealthy       = prometheus.NewDesc("synclane_cluster_healthy", "Whether this member's membership lease is known alive.", nil, nil)
	descForwarded     = prometheus.NewDesc("synclane_cluster_forwarded_total", "Calls forwarded to the partition's owner.", []string{"call"}, nil)
	descServed        = prometheus.NewDesc("synclane_cluster_served_total", "Calls served for other members.", []string{"call"}, nil)
	descRetries       = prometheus.NewDesc("synclane_cluster_route_retries_total", "Routing attempts repeated after a moved or unreachable owner.", nil, nil)
	descUnavailable   = prometheus.NewDesc("synclane_cluster_unavailable_total", "Requests answered unavailable (503) after the move timeout.", nil, nil)
	descOwnershipLost = prometheus.NewDesc("synclane_cluster_ownership_lost_total", "Local writes refused by the ownership fence.", nil, nil)
	descEvictions     = prometheus.NewDesc("synclane_cluster_evictions_total", "Partition actors stopped because their partition moved.", nil, nil)

	descLinks          = prometheus.NewDesc("synclane_cluster_links", "Open follow links, by direction (out: to owners; in: from followers).", []string{"direction"}, nil)
	descFollowed       = prometheus.NewDesc("synclane_cluster_followed_partitions", "Partitions the realtime hub holds sockets of.", nil, nil)
	descFollowedRemote = prometheus.NewDesc("synclane_cluster_followed_remote_partitions", "Of those, the partitions followed at another member.", nil, nil)
	descFollowers      = prometheus.NewDesc("synclane_cluster_followers", "Follows served as a partition's owner.", nil, nil)
	descSent           = prometheus.NewDesc("synclane_cluster_messages_sent_total", "Follow-link messages written.", nil, nil)
	descReceived       = prometheus.NewDesc("synclane_cluster_messages_received_total", "Follow-link messages read.", nil, nil)
	descDropped        = prometheus.NewDesc("synclane_cluster_messages_dropped_total", "Follow-link messages not delivered.", nil, nil)
	descOverflows      = prometheus.NewDesc("synclane_cluster_link_overflows_total", "Follow links closed on a full send queue.", nil, nil)
	descDials          = prometheus.NewDesc("synclane_cluster_dials_total", "Follow links dialed.", nil, nil)
	descDialFailures   = prometheus.NewDesc("synclane_cluster_dial_failures_total", "Follow-link dials that failed.", nil, nil)
)

// clusterCollector reports an engine's cluster counters.
type clusterCollector struct{ eng *engine.Engine }

// NewCollector returns a prometheus.Collector of eng's cluster counters
// (nothing in single-process mode):
//
//	synclane_cluster_members                     members in this member's view
//	synclane_cluster_healthy                     1 while this member's lease is known alive
//	synclane_cluster_forwarded_total{call}       calls forwarded to an owner
//	synclane_cluster_served_total{call}          calls served for other members
//	synclane_cluster_route_retries_total         routing attempts repeated (moved or unreachable owner)
//	synclane_cluster_unavailable_total           requests answered 503 after the move timeout
//	synclane_cluster_ownership_lost_total        local writes refused by the fence
//	synclane_cluster_evictions_total             actors stopped because their partition moved
//
// No label carries a partition: calls are the five routed kinds.
func NewCollector(eng *engine.Engine) prometheus.Collector { return clusterCollector{eng: eng} }

// Describe implements prometheus.Collector.
func (c clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMembers, descHealthy, descForwarded, descServed, descRetries, descUnavailable, descOwnershipLost, descEvictions} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c clusterCollector) Collect(ch chan<- prometheus.Metric) {
	st, ok := c.eng.ClusterStats()
	if !ok {
		return
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	healthy := 0.0
	if st.Healthy {
		healthy = 1
	}
	gauge(descMembers, float64(len(st.Members)))
	gauge(descHealthy, healthy)
	for call, n := range st.Forwarded {
		counter(descForwarded, n, call)
	}
	for call, n := range st.Served {
		counter(descServed, n, call)
	}
	counter(descRetries, st.Retries)
	counter(descUnavailable, st.Unavailable)
	counter(descOwnershipLost, st.OwnershipLost)
	counter(descEvictions, st.Evictions)
}

// Describe implements prometheus.Collector.
func (r *Relay) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLinks, descFollowed, descFollowedRemote, descFollowers, descSent, descReceived, descDropped, descOverflows, descDials, descDialFailures} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the relay's Stats as of the
// scrape.
func (r *Relay) Collect(ch chan<- prometheus.Metric) {
	st := r.Stats()
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge(descLinks, st.InLinks, "in")
	gauge(descLinks, st.OutLinks, "out")
	gauge(descFollowed, st.Followed)
	gauge(descFollowedRemote, st.FollowedRemote)
	gauge(descFollowers, st.Followers)
	counter(descSent, st.Sent)
	counter(descReceived, st.Received)
	counter(descDropped, st.Dropped)
	counter(descOverflows, st.Overflows)
	counter(descDials, st.Dials)
	counter(descDialFailures, st.DialFailures)
}

var (
	descPeerConns         = prometheus.NewDesc("synclane_cluster_peer_connections", "Open frames connections between members, by direction (out: this member's calls; in: the others').", []string{"direction"}, nil)
	descPeerDials         = prometheus.NewDesc("synclane_cluster_peer_dials_total", "Frames connections dialed to other members (failed ones included).", nil, nil)
	descPeerDialFailures  = prometheus.NewDesc("synclane_cluster_peer_dial_failures_total", "Frames dials that failed (refused signatures and unreachable members; a member without the frames transport is not counted).", nil, nil)
	descPeerHTTPFallbacks = prometheus.NewDesc("synclane_cluster_peer_http_fallbacks_total", "Member calls sent over HTTP/1.1 although the frames transport is selected (the member does not serve it, or every connection to it is at its call cap).", nil, nil)
)

// NewTransportCollector returns a prometheus.Collector of the frames
// transport's counters: c's calls (out; nothing unless c uses
// ProtocolFrames) and the connections other members opened to h (in;
// either may be nil):
//
//	synclane_cluster_peer_connections{direction}   open frames connections (out, in)
//	synclane_cluster_peer_dials_total              frames connections dialed
//	synclane_cluster_peer_dial_failures_total      of which failed
//	synclane_cluster_peer_http_fallbacks_total     calls sent over HTTP/1.1 instead
func NewTransportCollector(c *Client, h *Handler) prometheus.Collector {
	return transportCollector{c: c, h: h}
}

type transportCollector struct {
	c *Client
	h *Handler
}

// Describe implements prometheus.Collector.
func (t transportCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPeerConns, descPeerDials, descPeerDialFailures, descPeerHTTPFallbacks} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (t transportCollector) Collect(ch chan<- prometheus.Metric) {
	if t.c != nil && t.c.frames != nil {
		p := t.c.frames
		ch <- prometheus.MustNewConstMetric(descPeerConns, prometheus.GaugeValue, float64(p.open.Load()), "out")
		ch <- prometheus.MustNewConstMetric(descPeerDials, prometheus.CounterValue, float64(p.dials.Load()))
		ch <- prometheus.MustNewConstMetric(descPeerDialFailures, prometheus.CounterValue, float64(p.dialFailures.Load()))
		ch <- prometheus.MustNewConstMetric(descPeerHTTPFallbacks, prometheus.CounterValue, float64(p.fallbacks.Load()))
	}
	if t.h != nil {
		t.h.frames.mu.Lock()
		n := len(t.h.frames.conns)
		t.h.frames.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(descPeerConns, prometheus.GaugeValue, float64(n), "in")
	}
}
