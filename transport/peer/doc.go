// Package peer is the member-to-member transport of a synclane cluster:
// the routes a member serves to the others under /_cluster/ (forwarded
// sync requests and realtime calls, the realtime follow link) and the
// client that calls them, authenticated with the cluster secret
// (auth.go). Client requests never reach these routes without the secret.
//
// Relay (relay.go) carries realtime events and presence across the
// members over the follow link (wire.go: the wire format, versioned): a
// member holding sockets of a partition follows it at the partition's
// owner, which relays its commits, registrations and presence to it.
package peer
