package main

import (
	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/blobs"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/transport/testcontrol"
)

// testControls wires the hooks of the test-control surface (--test-control)
// into cfg and returns them: the harness's scope resolver, the virtual
// clock (--clock-ms), the declarative validators, the idempotency fault
// and the start of the blob presign switch. cfg.Store is left alone: test
// mode runs the production store and its transactions.
//
// The presign switch starts off unless --signed-url-ttl configured signed
// URLs: presigned transfers are a capability the host opts into (SPEC
// §5.9.3: the direct PUT remains the path when no presign configuration
// exists; §5.9.5: downloads are URLs when the host configured signed
// URLs), and POST /_test/blob-presign {"enabled":bool} moves it.
func (c serveConfig) testControls(cfg *engine.Config, sch *schema.Schema) testcontrol.Controls {
	controls := testcontrol.Controls{Resolver: testcontrol.NewResolver(), Faults: &testcontrol.IdempotencyFault{}}
	if c.clockMs >= 0 {
		controls.Clock = testcontrol.NewClock(c.clockMs)
		cfg.Now = controls.Clock.Now
	}
	cfg.IdempotencyFault = controls.Faults.Take
	cfg.Blobs.Presign = blobs.PresignOff
	if c.signedURLTTL > 0 {
		cfg.Blobs.Presign = blobs.PresignOn
	}
	controls.Rules = testcontrol.NewRules(sch)
	controls.Rules.Install(cfg) // declarative validators (PUT /_test/validators, /_test/commit-validator)
	return controls
}
