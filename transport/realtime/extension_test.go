package realtime_test

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/realtime"
)

// A hub started on an engine whose Config never got its hooks would hear
// of no commit: Start says so in an error log; a hub wired through
// Config.Extensions (or Hooks before New) logs nothing.
func TestHubStartedWithoutHooksSaysSo(t *testing.T) {
	s := schema.MustDemo()
	for _, tc := range []struct {
		name    string
		wire    func(h *realtime.Hub, cfg *engine.Config)
		start   bool
		wantErr bool
	}{
		{"extensions", func(h *realtime.Hub, cfg *engine.Config) { cfg.Extensions = []engine.Extension{h} }, false, false},
		{"hooks then start", func(h *realtime.Hub, cfg *engine.Config) { h.Hooks(cfg) }, true, false},
		{"start without hooks", func(*realtime.Hub, *engine.Config) {}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.ErrorLevel)
			h := realtime.New(realtime.Options{Logger: zap.New(core)})
			defer h.Close()
			cfg := engine.Config{Schema: s, Backend: memory.New().Backend(), Resolver: engine.AllowAll(s)}
			tc.wire(h, &cfg)
			eng, err := engine.New(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer eng.Close()
			if tc.start {
				h.Start(eng)
			}
			if got := logs.FilterMessageSnippet("without its engine hooks").Len() > 0; got != tc.wantErr {
				t.Fatalf("error logged: %v, want %v", got, tc.wantErr)
			}
		})
	}
}
