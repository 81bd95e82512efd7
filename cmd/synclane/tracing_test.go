package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
)

func TestOTLPEndpointValidation(t *testing.T) {
	for _, c := range []struct {
		in, want string // want "" = refused
	}{
		{"http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"},
		{"https://collector.example.com/", "https://collector.example.com/v1/traces"},
		{"http://c:4318/custom/path", "http://c:4318/custom/path"},
		{"127.0.0.1:4318", ""},
		{"grpc://c:4317", ""},
		{"http://", ""},
	} {
		tc := tracingConfig{otlpEndpoint: c.in}
		got, err := tc.exportURL()
		if c.want == "" {
			if err == nil || tc.validate() == nil {
				t.Errorf("%q accepted as %q", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want || tc.validate() != nil {
			t.Errorf("%q: %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

// TestOTLPExportFlushedOnShutdown: with --otlp-endpoint the engine gets
// an SDK provider whose spans reach the collector over OTLP/HTTP, at
// /v1/traces, by the time shutdown returns (the batch is flushed), with
// service.name synclane in the resource.
func TestOTLPExportFlushedOnShutdown(t *testing.T) {
	got := make(chan string, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r.Method + " " + r.URL.Path + " " + r.Header.Get("Content-Type") + " " + string(b)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "none") // readable body
	tc := tracingConfig{otlpEndpoint: srv.URL}
	var cfg engine.Config
	shutdown, err := tc.configure(context.Background(), &cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tracing == nil {
		t.Fatal("no TracerProvider configured")
	}
	_, span := cfg.Tracing.Tracer("test").Start(context.Background(), "synclane.sync")
	span.End()
	shutdown()
	select {
	case req := <-got:
		if !strings.HasPrefix(req, "POST /v1/traces application/x-protobuf ") || !strings.Contains(req, "synclane.sync") || !strings.Contains(req, "synclane") {
			t.Fatalf("collector got %.200q", req)
		}
		if !strings.Contains(req, "service.name") {
			t.Errorf("no service.name in the export: %.300q", req)
		}
	default:
		t.Fatal("shutdown returned before the span was exported")
	}
}

func TestNoOTLPEndpointNoTracing(t *testing.T) {
	var cfg engine.Config
	shutdown, err := (&tracingConfig{}).configure(context.Background(), &cfg, zap.NewNop())
	if err != nil || cfg.Tracing != nil {
		t.Fatalf("tracing configured without --otlp-endpoint: %v, %v", cfg.Tracing, err)
	}
	shutdown()
}
