package engine

// Extension is a component wired into an engine through
// Config.Extensions: New calls Configure with the Config before it reads
// anything else of it, and Start with the engine once it is built (before
// New returns, and only when New succeeds). transport/realtime.Hub
// implements it.
type Extension interface {
	// Configure installs the extension's hooks into cfg (OnCommit,
	// OnRegistration, ...), chaining any already set.
	Configure(cfg *Config)
	// Start hands the extension the engine it serves.
	Start(e *Engine)
}
