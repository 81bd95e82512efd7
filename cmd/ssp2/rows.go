package main

import (
	"fmt"
	"os"

	"github.com/synclane/synclane/protocol/schema"
)

// loadSchema reads and compiles the schema file given to --schema.
func loadSchema(path string) (*schema.Schema, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--schema: %w", err)
	}
	s, err := schema.Parse(src)
	if err != nil {
		return nil, fmt.Errorf("--schema %s: %w", path, err)
	}
	return s, nil
}

// rowView is what --schema gives decode and encode: the schema whose
// column types read and write rows, and where decode's notes go.
type rowView struct {
	schema *schema.Schema
	note   func(msg string)
}
