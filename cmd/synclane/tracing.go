package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
)

// Tracing of `synclane serve` (issue 32): with --otlp-endpoint the
// engine's spans are exported over OTLP/HTTP (protobuf) through a batch
// span processor, flushed when the server stops. The OpenTelemetry SDK's
// own environment variables refine it where the SDK reads them:
// OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_TIMEOUT,
// OTEL_EXPORTER_OTLP_COMPRESSION, OTEL_EXPORTER_OTLP_CERTIFICATE (and
// their OTEL_EXPORTER_OTLP_TRACES_* forms), OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG, OTEL_BSP_* (the batch processor),
// OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME. The flag's URL wins over
// OTEL_EXPORTER_OTLP_ENDPOINT. Without the flag nothing is traced.

// tracingShutdownTimeout bounds the final flush of spans at shutdown.
const tracingShutdownTimeout = 5 * time.Second

// tracingConfig holds the tracing flags.
type tracingConfig struct {
	otlpEndpoint string
}

func tracingFlags(fs *flag.FlagSet, c *tracingConfig) {
	fs.StringVar(&c.otlpEndpoint, "otlp-endpoint", "", "export OpenTelemetry traces over OTLP/HTTP to this collector URL, e.g. http://127.0.0.1:4318 (path default /v1/traces; the OTEL_* variables of the SDK refine it; off when empty)")
}

// exportURL returns the OTLP/HTTP traces URL of the flag's value.
func (c *tracingConfig) exportURL() (string, error) {
	u, err := url.Parse(c.otlpEndpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("--otlp-endpoint %q: want an http:// or https:// URL of an OTLP/HTTP collector, e.g. http://127.0.0.1:4318", c.otlpEndpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// validate checks the flags before anything starts.
func (c *tracingConfig) validate() error {
	if c.otlpEndpoint == "" {
		return nil
	}
	_, err := c.exportURL()
	return err
}

// configure sets cfg.Tracing to an SDK provider exporting to the
// endpoint, when one is given; shutdown flushes and stops it (a no-op
// without tracing) and must run after the engine closed.
func (c *tracingConfig) configure(ctx context.Context, cfg *engine.Config, log *zap.Logger) (shutdown func(), err error) {
	if c.otlpEndpoint == "" {
		return func() {}, nil
	}
	endpoint, err := c.exportURL()
	if err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("--otlp-endpoint: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "synclane"), attribute.String("service.version", serviceVersion())),
		resource.WithFromEnv(), // OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME (they win)
		resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	cfg.Tracing = tp
	log.Info("exporting traces over OTLP/HTTP", zap.String("endpoint", endpoint))
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("flushing traces at shutdown failed; the last spans may be lost", zap.Error(err))
		}
	}, nil
}

// serviceVersion is the service.version of the spans: the version
// `synclane version` prints (version.go).
func serviceVersion() string {
	bi, ok := debug.ReadBuildInfo()
	return readBuildVersion(bi, ok, version).Module
}
