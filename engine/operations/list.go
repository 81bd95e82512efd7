package operations

import "slices"

// QueryIDs returns the registered query ids, sorted.
func (r *Registry) QueryIDs() []string { return sortedKeys(r.queries) }

// CommandIDs returns the registered command ids, sorted.
func (r *Registry) CommandIDs() []string { return sortedKeys(r.commands) }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
