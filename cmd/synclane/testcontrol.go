package main

import (
	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/transport/testcontrol"
)

// testControls wires the hooks of the test-control surface (--test-control)
// into cfg and returns them: the harness's scope resolver, the virtual
// clock (--clock-ms), the declarative validators and the idempotency
// fault. cfg.Store is left alone: test mode runs the production store and
// its transactions.
func (c serveConfig) testControls(cfg *engine.Config, sch *schema.Schema) testcontrol.Controls {
	controls := testcontrol.Controls{Resolver: testcontrol.NewResolver(), Faults: &testcontrol.IdempotencyFault{}}
	if c.clockMs >= 0 {
		controls.Clock = testcontrol.NewClock(c.clockMs)
		cfg.Now = controls.Clock.Now
	}
	cfg.IdempotencyFault = controls.Faults.Take
	controls.Rules = testcontrol.NewRules(sch)
	controls.Rules.Install(cfg) // declarative validators (PUT /_test/validators, /_test/commit-validator)
	return controls
}
