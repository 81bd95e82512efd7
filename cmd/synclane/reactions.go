package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/synclane/synclane/engine/reactions"
	"github.com/synclane/synclane/storage"
)

// reactionConfig holds the durable-reaction flags of serve. The binary has
// no host handlers of its own (embed the engine for those); with
// --test-control, --test-reaction-log registers the test sink handler
// "test.sink" that declarative validator rules can schedule.
type reactionConfig struct {
	lease       time.Duration
	maxAttempts int
	// testLog is the file the test sink appends one JSON line per delivery
	// to; testFail makes every sink attempt fail (nothing is delivered).
	testLog  string
	testFail bool
	// testHold is how long each test sink delivery takes.
	testHold time.Duration
}

// TestReactionSink is the name of the test-control reaction handler.
const TestReactionSink = "test.sink"

func reactionFlags(fs *flag.FlagSet, r *reactionConfig) {
	fs.DurationVar(&r.lease, "reaction-lease", 30*time.Second, "how long a claimed reaction is hidden from other workers (handlers get 90% of it; at least 1s)")
	fs.IntVar(&r.maxAttempts, "reaction-max-attempts", 10, "delivery attempts of a reaction scheduled without maxAttempts, 1-100, before it is dead-lettered")
	fs.StringVar(&r.testLog, "test-reaction-log", "", "with --test-control: register the reaction handler \"test.sink\", which appends each delivery to this file as a JSON line")
	fs.DurationVar(&r.testHold, "test-reaction-hold", 0, "with --test-reaction-log: each delivery of \"test.sink\" takes this long (ending early with an error if its context ends), so overlapping deliveries would show")
	fs.BoolVar(&r.testFail, "test-reaction-fail", false, "with --test-reaction-log: every delivery attempt of \"test.sink\" fails (reactions stay pending, then dead-letter)")
}

func (r reactionConfig) validate(testControl bool) error {
	switch {
	case r.lease < time.Second:
		return errors.New("--reaction-lease must be at least 1s")
	case r.maxAttempts < 1 || r.maxAttempts > storage.MaxReactionAttempts:
		return errors.New("--reaction-max-attempts must be 1-100")
	case r.testLog != "" && !testControl:
		return errors.New("--test-reaction-log needs --test-control")
	case r.testFail && r.testLog == "":
		return errors.New("--test-reaction-fail needs --test-reaction-log")
	case r.testHold != 0 && (r.testLog == "" || r.testHold < 0 || r.testHold > time.Minute):
		return errors.New("--test-reaction-hold needs --test-reaction-log and is 0-1m")
	}
	return nil
}

// engineConfig returns the engine's reaction configuration (no handlers,
// hence no worker, without --test-reaction-log).
func (r reactionConfig) engineConfig() reactions.Options {
	rc := reactions.Options{Lease: r.lease, DefaultMaxAttempts: r.maxAttempts}
	if r.testLog != "" {
		sink := &testSink{path: r.testLog, fail: r.testFail, hold: r.testHold}
		rc.Handlers = map[string]reactions.Handler{TestReactionSink: sink.deliver}
	}
	return rc
}

// testSink appends deliveries to a file, each line synced before the
// delivery is acknowledged.
type testSink struct {
	mu   sync.Mutex
	path string
	fail bool
	hold time.Duration
}

// sinkLine is one delivery in the test sink's file.
type sinkLine struct {
	ID        int64  `json:"id"`
	Partition string `json:"partition"`
	CommitSeq int64  `json:"commitSeq"`
	Payload   string `json:"payload"`
	Attempt   int    `json:"attempt"`
	// Pid is the delivering process; StartUs and EndUs bound the delivery
	// (Unix microseconds).
	Pid     int   `json:"pid"`
	StartUs int64 `json:"startUs"`
	EndUs   int64 `json:"endUs"`
}

func (s *testSink) deliver(ctx context.Context, r reactions.Stored) error {
	if s.fail {
		return errors.New("the test sink is set to fail (--test-reaction-fail)")
	}
	start := time.Now()
	if s.hold > 0 {
		t := time.NewTimer(s.hold)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	b, err := json.Marshal(sinkLine{ID: r.ID, Partition: r.Partition, CommitSeq: r.CommitSeq, Payload: string(r.Payload), Attempt: r.Attempts,
		Pid: os.Getpid(), StartUs: start.UnixMicro(), EndUs: time.Now().UnixMicro()})
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := os.OpenFile(s.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("test sink: %w", err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("test sink: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("test sink: %w", err)
	}
	return f.Close()
}
