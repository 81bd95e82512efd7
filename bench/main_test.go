package main

import (
	"os"
	"testing"
)

// TestMain lets the test binary act as the realtime idle case's child
// process (os.Executable is the test binary under go test).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "realtime-holder" {
		os.Exit(realtimeHolder(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "server-child" {
		os.Exit(serverChild(os.Args[2:]))
	}
	os.Exit(m.Run())
}
