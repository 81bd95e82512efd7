package cluster

// Owner returns the member of v that owns partition: the member with the
// highest rendezvous score (Score) for it, ties broken by the smaller ID.
// ok is false when v has no member. Every member computing Owner over the
// same view picks the same owner, and when a member joins or leaves only
// the partitions it gains or held move (about 1/N of them), so a rolling
// restart moves each partition at most twice.
func Owner(v View, partition string) (m Member, ok bool) {
	var best uint64
	for _, c := range v.Members {
		s := Score(c.ID, partition)
		if !ok || s > best || (s == best && c.ID < m.ID) {
			m, best, ok = c, s, true
		}
	}
	return m, ok
}

// Score is the rendezvous (highest random weight) score of member for
// partition: FNV-1a over the member ID, a zero byte and the partition,
// finished with the splitmix64 mixer so that IDs differing in one
// character spread over the whole range.
func Score(member, partition string) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(member); i++ {
		h ^= uint64(member[i])
		h *= prime
	}
	h *= prime // the separator (a zero byte)
	for i := 0; i < len(partition); i++ {
		h ^= uint64(partition[i])
		h *= prime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}
