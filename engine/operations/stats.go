package operations

import (
	"errors"
	"sync"

	"github.com/synclane/synclane/protocol/opwire"
	"github.com/synclane/synclane/protocol/syncerr"
)

// Remote operation counters, shown in /metrics and the admin surface.

// MaxCodes bounds the distinct refusal codes counted per kind;
// further codes are counted under "other" (the codes come from the
// catalogue and from host handlers, which may invent their own).
const MaxCodes = 64

// Stats counts this process's remote operations by kind ("query",
// "command", or "invalid" for a request whose kind is neither).
type Stats struct {
	// Executed counts operations answered with a result, by kind (a
	// command's cached replay counts too).
	Executed map[string]uint64 `json:"executed"`
	// Refused counts operations answered with an error, by kind and
	// protocol code.
	Refused map[string]map[string]uint64 `json:"refused"`
}

// Registered lists the registered remote operations.
type Registered struct {
	Queries  []string `json:"queries"`
	Commands []string `json:"commands"`
}

type operationCounters struct {
	mu       sync.Mutex
	executed map[string]uint64
	refused  map[string]map[string]uint64
}

func (c *operationCounters) count(req *opwire.Request, err error) {
	kind := "invalid"
	if req != nil && (req.Kind == opwire.KindQuery || req.Kind == opwire.KindCommand) {
		kind = req.Kind
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		if c.executed == nil {
			c.executed = map[string]uint64{}
		}
		c.executed[kind]++
		return
	}
	code := string(syncerr.CodeOf(err))
	var coded *syncerr.Error
	if !errors.As(err, &coded) {
		code = string(syncerr.InternalError)
	}
	if c.refused == nil {
		c.refused = map[string]map[string]uint64{}
	}
	byCode := c.refused[kind]
	if byCode == nil {
		byCode = map[string]uint64{}
		c.refused[kind] = byCode
	}
	if _, seen := byCode[code]; !seen && len(byCode) >= MaxCodes {
		code = "other"
	}
	byCode[code]++
}

// Stats returns a copy of this process's remote operation counters.
func (s *Service) Stats() Stats {
	c := &s.ops
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Stats{Executed: map[string]uint64{}, Refused: map[string]map[string]uint64{}}
	for k, v := range c.executed {
		st.Executed[k] = v
	}
	for k, m := range c.refused {
		st.Refused[k] = map[string]uint64{}
		for code, v := range m {
			st.Refused[k][code] = v
		}
	}
	return st
}

// Registered returns the ids of the registered remote queries and
// commands (empty without Options.Registry).
func (s *Service) Registered() Registered {
	r := Registered{Queries: []string{}, Commands: []string{}}
	if reg := s.reg; reg != nil {
		r.Queries, r.Commands = reg.QueryIDs(), reg.CommandIDs()
	}
	return r
}
