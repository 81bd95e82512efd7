package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/synclane/synclane/transport/accesslog"
)

// logConfig are serve's logging flags besides --log-level.
type logConfig struct {
	// format is --log-format: json (one JSON object per line, the
	// default) or console (zap's human-readable lines).
	format string
	// accessLog is --access-log: one info line per HTTP request
	// (transport/accesslog).
	accessLog bool
}

func logFlags(fs *flag.FlagSet, c *logConfig) {
	fs.StringVar(&c.format, "log-format", "json", "log format on stderr: json (one JSON object per line) or console (human-readable lines)")
	fs.BoolVar(&c.accessLog, "access-log", true, "log one info line per HTTP request (method, route, status, bytes, duration, request_id, actor, partition); --access-log=false turns it off")
}

// newLogger returns serve's logger: level and c.format, to w. An unknown
// level or format is an error naming the flag.
func (c logConfig) newLogger(level string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	var encoder zapcore.Encoder
	switch c.format {
	case "json", "":
		encoder = zapcore.NewJSONEncoder(enc)
	case "console":
		enc.EncodeLevel = zapcore.CapitalLevelEncoder
		enc.EncodeDuration = zapcore.StringDurationEncoder
		encoder = zapcore.NewConsoleEncoder(enc)
	default:
		return nil, fmt.Errorf("--log-format: %q is neither json nor console", c.format)
	}
	return zap.New(zapcore.NewCore(encoder, zapcore.AddSync(w), lvl)), nil
}

// handler wraps serve's router in the access log unless --access-log=false.
func (c logConfig) handler(next http.Handler, log *zap.Logger) http.Handler {
	if !c.accessLog {
		return next
	}
	return accesslog.Handler(next, log.Named("access"))
}
