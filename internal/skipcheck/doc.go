// Package skipcheck holds no code: its test keeps the repository's test
// skips honest, so a green run that skipped something says how to run it.
// Every t.Skip / t.Skipf / b.Skip message in the module must name the
// environment variable (or the -short flag) that controls it, or say that
// no variable does (a skip by design).
package skipcheck
