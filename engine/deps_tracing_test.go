package engine_test

import (
	"slices"
	"strings"
	"testing"
)

// tracingAPI are the OpenTelemetry packages synclane's library packages
// may import: the API only. The SDK (go.opentelemetry.io/otel/sdk/...)
// and the exporters are the embedder's choice (cmd/synclane links them
// for --otlp-endpoint; tests link the SDK's in-memory exporter).
var tracingAPI = []string{
	"go.opentelemetry.io/otel",
	"go.opentelemetry.io/otel/attribute",
	"go.opentelemetry.io/otel/codes",
	"go.opentelemetry.io/otel/propagation",
	"go.opentelemetry.io/otel/trace",
	"go.opentelemetry.io/otel/trace/noop",
}

// traceSDK are the import-path prefixes of the tracing SDK and the trace
// exporters, which the core must not link. (protoactor links
// go.opentelemetry.io/otel/sdk/metric and the Prometheus metric exporter
// through package actors; that is its metrics, not tracing, and predates
// tracing.)
var traceSDK = []string{
	"go.opentelemetry.io/otel/sdk/trace",
	"go.opentelemetry.io/otel/exporters/otlp",
	"go.opentelemetry.io/otel/exporters/stdout",
	"go.opentelemetry.io/proto/otlp",
}

// TestCoreLinksNoTraceSDK: the engine, the partition, the storage
// interfaces, the memory backend and the transports link no tracing SDK
// and no trace exporter (an embedder passes its own TracerProvider).
func TestCoreLinksNoTraceSDK(t *testing.T) {
	var found []string
	for _, d := range listDeps(t, "./engine/...", "./partition", "./storage", "./storage/memory", "./transport/...") {
		if slices.ContainsFunc(traceSDK, func(p string) bool { return strings.HasPrefix(d, p) }) {
			found = append(found, d)
		}
	}
	if len(found) > 0 {
		t.Fatalf("the core links the tracing SDK or an exporter:\n%s", strings.Join(found, "\n"))
	}
}

// TestOnlyTracingAPIImported: no synclane library package imports an
// OpenTelemetry package beyond the API (tracingAPI), tests aside; the
// programs (package main: cmd/synclane, bench, examples) may link an SDK
// and exporters.
func TestOnlyTracingAPIImported(t *testing.T) {
	var bad []string
	apiUsers := 0
	for _, line := range strings.Split(strings.TrimSpace(goList(t, "-f", "{{.Name}} {{.ImportPath}} {{join .Imports \" \"}}", "./...")), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] == "main" {
			continue
		}
		for _, imp := range f[2:] {
			if !strings.HasPrefix(imp, "go.opentelemetry.io/") {
				continue
			}
			if !slices.Contains(tracingAPI, imp) {
				bad = append(bad, f[1]+" imports "+imp)
			}
			apiUsers++
		}
	}
	if apiUsers == 0 {
		t.Fatal("no package imports the OpenTelemetry API: the check sees nothing")
	}
	if len(bad) > 0 {
		t.Fatalf("library packages import OpenTelemetry beyond the API:\n%s", strings.Join(bad, "\n"))
	}
}

// TestServerLinksOTLPExporter: the server binary links the OTLP/HTTP
// exporter behind --otlp-endpoint (so the check above sees a real
// dependency).
func TestServerLinksOTLPExporter(t *testing.T) {
	if deps := listDeps(t, "./cmd/synclane"); !slices.Contains(deps, "go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp") {
		t.Fatal("cmd/synclane does not link otlptracehttp")
	}
}
