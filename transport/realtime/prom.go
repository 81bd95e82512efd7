package realtime

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/synclane/synclane/protocol/ssp2"
)

var (
	descSockets      = prometheus.NewDesc("synclane_realtime_sockets", "Open realtime sockets.", nil, nil)
	descAccepted     = prometheus.NewDesc("synclane_realtime_accepted_total", "Realtime sockets accepted.", nil, nil)
	descRefusedLimit = prometheus.NewDesc("synclane_realtime_refused_limit_total", "Realtime upgrades refused at the connection limit.", nil, nil)
	descRefused      = prometheus.NewDesc("synclane_realtime_refused_total", "Realtime upgrades refused at a socket cap, by cap: process, client, actor.", []string{"reason"}, nil)
	descDeltas       = prometheus.NewDesc("synclane_realtime_deltas_total", "Realtime deltas queued on sockets.", nil, nil)
	descDeltaBuilds  = prometheus.NewDesc("synclane_realtime_delta_builds_total", "Distinct realtime deltas encoded.", nil, nil)
	descRounds       = prometheus.NewDesc("synclane_realtime_rounds_total", "Socket rounds served.", nil, nil)
	descPresence     = prometheus.NewDesc("synclane_realtime_presence_total", "Presence events queued on sockets.", nil, nil)
	descReaderWaits  = prometheus.NewDesc("synclane_realtime_round_reader_waits_total", "Times a socket round's answer waited for the socket's reader to take bytes the client sent.", nil, nil)
	descWakes        = prometheus.NewDesc("synclane_realtime_wakes_total", "Wake-ups sent, by reason.", []string{"reason"}, nil)
	descClosed       = prometheus.NewDesc("synclane_realtime_closed_total", "Sockets closed by the server, by reason.", []string{"reason"}, nil)
)

// Describe implements prometheus.Collector.
func (h *Hub) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSockets, descAccepted, descRefusedLimit, descRefused, descDeltas, descDeltaBuilds, descRounds, descPresence, descReaderWaits, descWakes, descClosed} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the hub's counters (Stats) as
// of the scrape, every reason label always present.
func (h *Hub) Collect(ch chan<- prometheus.Metric) {
	st := h.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	ch <- prometheus.MustNewConstMetric(descSockets, prometheus.GaugeValue, float64(st.Sockets))
	counter(descAccepted, st.Accepted)
	counter(descRefusedLimit, st.RefusedLimit)
	counter(descRefused, st.RefusedActor, RefusedActor)
	counter(descRefused, st.RefusedClient, RefusedClient)
	counter(descRefused, st.RefusedLimit, RefusedProcess)
	counter(descDeltas, st.Deltas)
	counter(descDeltaBuilds, st.DeltaBuilds)
	counter(descRounds, st.Rounds)
	counter(descPresence, st.Presence)
	counter(descReaderWaits, st.RoundReaderWaits)
	for _, r := range []string{ssp2.WakeCatchupRequired, ssp2.WakeDeltaTooLarge, ssp2.WakeResetRequired} {
		counter(descWakes, st.Wakes[r], r)
	}
	for _, r := range []string{"ping", "protocol", "shutdown", "slow"} {
		counter(descClosed, st.Closed[r], r)
	}
}
