package realtime

// SetTookRound sets the hook a socket's reader runs right after it took a
// round's request (nil: none); set it before the sockets it is for
// connect.
func SetTookRound(h *Hub, f func(clientID string)) { h.tookRound = f }
