package engine

// CommitHooks are the commit and registration notifications of a Config
// (OnCommit, OnCommitKeys, OnCommitOutcome, OnRegistration), as a
// component that listens to them supplies its own. A nil field is not
// installed.
type CommitHooks struct {
	OnCommit        func(partition string, maxSeq int64)
	OnCommitKeys    func(partition string, commits []CommitKeys)
	OnCommitOutcome func(partition string, durable bool)
	OnRegistration  func(partition string, r Registration)
}

// AddCommitHooks installs h's set hooks in c after the ones c already has:
// each notification then calls the earlier hook first, then h's. Several
// components (a realtime hub, a cluster relay, an operation watch) listen
// side by side this way; call it before New (an Extension's Configure
// does).
func (c *Config) AddCommitHooks(h CommitHooks) {
	c.OnCommit = chain2(c.OnCommit, h.OnCommit)
	c.OnCommitKeys = chain2(c.OnCommitKeys, h.OnCommitKeys)
	c.OnCommitOutcome = chain2(c.OnCommitOutcome, h.OnCommitOutcome)
	c.OnRegistration = chain2(c.OnRegistration, h.OnRegistration)
}

// chain2 returns a hook calling first, then next (either may be nil).
func chain2[T any](first, next func(string, T)) func(string, T) {
	switch {
	case next == nil:
		return first
	case first == nil:
		return next
	}
	return func(p string, v T) {
		first(p, v)
		next(p, v)
	}
}
