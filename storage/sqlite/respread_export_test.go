package sqlite

// SetRespreadRename replaces the swap's rename for a test; the returned
// func restores it.
func SetRespreadRename(f func(from, to string) error) (restore func()) {
	prev := respreadRename
	respreadRename = f
	return func() { respreadRename = prev }
}

// SetOrphanWalkPages sets orphanWalkPages for a test; the returned func
// restores it.
func SetOrphanWalkPages(n int) (restore func()) {
	old := orphanWalkPages
	orphanWalkPages = n
	return func() { orphanWalkPages = old }
}
