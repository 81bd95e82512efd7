package syncerr

// Known reports whether code is in the protocol's error catalog (Lookup
// answers a default for the others). Callers labelling a metric by code
// use it to keep the label set bounded.
func Known(code Code) bool {
	_, ok := catalog[code]
	return ok
}
