// Package peer is the member-to-member transport of a synclane cluster:
// the routes a member serves to the others under /_cluster/ (forwarded
// sync requests and realtime calls, the realtime follow link) and the
// client that calls them, authenticated with the cluster secret
// (auth.go). Client requests never reach these routes without the secret.
package peer
