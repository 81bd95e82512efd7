package testcontrol

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

// Declarative host hooks: a harness cannot ship Go code to the server, so
// PUT /_test/validators and PUT /_test/commit-validator install rules that
// the server's row validators and commit validator (installed at start by
// Rules.Install) evaluate. Each PUT replaces the rule list of its hook; an
// empty list removes every rule. Bodies:
//
//	PUT /_test/validators
//	{"rules":[{"table":"things",           // required, a schema table
//	           "op":"upsert",              // optional: "upsert" or "delete"
//	           "column":"project_id",      // optional condition: the candidate
//	           "equals":"p-blocked",       //   row's column (stored row for a
//	                                       //   delete) equals this JSON value
//	           "reject":{"code":"app.blocked","message":"...","details":{...}},
//	           "throw":true,               // or: fail with a plain error
//	           "react":{"name":"test.sink","payload":"text","maxAttempts":3}}]}
//
//	PUT /_test/commit-validator
//	{"rules":[{"table":"things","scopes":{"project":["p1"]},"maxRows":2,
//	           "reject":{...} | "throw":true}]}
//
// A row rule matches a write of its table (and op and condition, when
// given); the first matching rule with reject or throw decides; every
// matching react schedules its reaction. A commit rule reads the candidate
// state inside the push transaction (ScanRows with the rule's scopes, at
// most maxRows+1 rows, maxRows 0-999) and fails the commit when more than
// maxRows rows match. At most MaxRules rules per hook; a body that breaks
// these rules is refused with 400 sync.invalid_request and changes
// nothing.

// MaxRules bounds the rules of one hook.
const MaxRules = 64

// Rules holds the declarative rules; its methods are safe for concurrent use.
type Rules struct {
	sch    *schema.Schema
	mu     sync.RWMutex
	row    []RowRule
	commit []CommitRule
}

// RuleVerdict is what a matching rule does: reject with a host code, or
// throw (a plain error: sync.constraint_violation).
type RuleVerdict struct {
	Reject *RuleRejection `json:"reject,omitempty"`
	Throw  bool           `json:"throw,omitempty"`
}

// RuleRejection is a rule's host rejection.
type RuleRejection struct {
	Code    string                   `json:"code"`
	Message string                   `json:"message,omitempty"`
	Details *engine.RejectionDetails `json:"details,omitempty"`
}

// RuleReaction is a reaction a row rule schedules.
type RuleReaction struct {
	Name        string `json:"name"`
	Payload     string `json:"payload,omitempty"`
	MaxAttempts int    `json:"maxAttempts,omitempty"`
}

// RowRule is one declarative row-validator rule.
type RowRule struct {
	Table  string          `json:"table"`
	Op     string          `json:"op,omitempty"`
	Column string          `json:"column,omitempty"`
	Equals json.RawMessage `json:"equals,omitempty"`
	React  *RuleReaction   `json:"react,omitempty"`
	RuleVerdict
}

// CommitRule is one declarative commit-validator rule.
type CommitRule struct {
	Table   string              `json:"table"`
	Scopes  map[string][]string `json:"scopes"`
	MaxRows int                 `json:"maxRows"`
	RuleVerdict
}

// NewRules returns an empty rule set for s.
func NewRules(s *schema.Schema) *Rules { return &Rules{sch: s} }

// Install sets cfg's Validators (one per table) and CommitValidator to
// evaluate the rules.
func (r *Rules) Install(cfg *engine.Config) {
	cfg.Validators = map[string]engine.RowValidator{}
	for _, t := range r.sch.Tables {
		cfg.Validators[t.Name] = r.validateRow
	}
	cfg.CommitValidator = r.validateCommit
}

func (v RuleVerdict) err(what string) error {
	if v.Throw {
		return fmt.Errorf("test-control %s rule throws", what)
	}
	if v.Reject != nil {
		return &engine.Rejection{Code: v.Reject.Code, Message: v.Reject.Message, Details: v.Reject.Details}
	}
	return nil
}

func (r *Rules) validateRow(ctx context.Context, w *engine.RowWrite) error {
	r.mu.RLock()
	rules := r.row
	r.mu.RUnlock()
	var verdict error
	for _, rule := range rules {
		if !rule.matches(w) {
			continue
		}
		if rule.React != nil {
			if err := w.React(engine.Reaction{Name: rule.React.Name, Payload: []byte(rule.React.Payload), MaxAttempts: rule.React.MaxAttempts}); err != nil {
				return err
			}
		}
		if verdict == nil {
			verdict = rule.err("validator")
		}
	}
	return verdict
}

func (rule RowRule) matches(w *engine.RowWrite) bool {
	if rule.Table != w.Table.Name {
		return false
	}
	switch rule.Op {
	case "upsert":
		if w.Op != ssp2.OpUpsert {
			return false
		}
	case "delete":
		if w.Op != ssp2.OpDelete {
			return false
		}
	}
	if rule.Column == "" {
		return true
	}
	row := w.Row
	if row == nil && w.Stored != nil {
		row = w.Stored.Values
	}
	i := w.Table.Column(rule.Column)
	if i < 0 || row == nil {
		return false
	}
	got, err := json.Marshal(row[i])
	if err != nil {
		return false
	}
	var want any
	if json.Unmarshal(rule.Equals, &want) != nil {
		return false
	}
	norm, _ := json.Marshal(want)
	return string(got) == string(norm)
}

func (r *Rules) validateCommit(ctx context.Context, c *engine.CommitView) error {
	r.mu.RLock()
	rules := r.commit
	r.mu.RUnlock()
	for _, rule := range rules {
		rows, err := c.ScanRows(ctx, engine.ScanQuery{Table: rule.Table, Scopes: rule.Scopes, Limit: rule.MaxRows + 1})
		if err != nil {
			return err
		}
		if len(rows) > rule.MaxRows {
			return rule.err("commit-validator")
		}
	}
	return nil
}

func (v RuleVerdict) check() error {
	switch {
	case v.Throw && v.Reject != nil:
		return errors.New("a rule has either reject or throw, not both")
	case v.Reject != nil && v.Reject.Code == "":
		return errors.New("reject needs a code")
	}
	return nil
}

// putValidators replaces the row rules.
func (c Controls) putValidators(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Rules []RowRule `json:"rules"`
	}
	if !readJSON(w, r, &body) {
		return
	}
	if err := c.Rules.checkRows(body.Rules); err != nil {
		writeError(w, http.StatusBadRequest, syncerr.New(syncerr.InvalidRequest, "validators: %v", err))
		return
	}
	c.Rules.mu.Lock()
	c.Rules.row = body.Rules
	c.Rules.mu.Unlock()
	writeJSON(w, map[string]int{"rules": len(body.Rules)})
}

func (r *Rules) checkRows(rules []RowRule) error {
	if len(rules) > MaxRules {
		return fmt.Errorf("at most %d rules", MaxRules)
	}
	for i, rule := range rules {
		t := r.sch.Table(rule.Table)
		switch {
		case t == nil:
			return fmt.Errorf("rule %d: unknown table %q", i, rule.Table)
		case rule.Op != "" && rule.Op != "upsert" && rule.Op != "delete":
			return fmt.Errorf("rule %d: op must be upsert or delete", i)
		case rule.Column != "" && t.Column(rule.Column) < 0:
			return fmt.Errorf("rule %d: unknown column %q", i, rule.Column)
		case rule.Column != "" && !json.Valid(rule.Equals):
			return fmt.Errorf("rule %d: a column condition needs an equals value", i)
		case rule.React != nil && rule.React.Name == "":
			return fmt.Errorf("rule %d: react needs a name", i)
		}
		if err := rule.check(); err != nil {
			return fmt.Errorf("rule %d: %w", i, err)
		}
	}
	return nil
}

// putCommitValidator replaces the commit rules.
func (c Controls) putCommitValidator(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Rules []CommitRule `json:"rules"`
	}
	if !readJSON(w, r, &body) {
		return
	}
	if err := c.Rules.checkCommits(body.Rules); err != nil {
		writeError(w, http.StatusBadRequest, syncerr.New(syncerr.InvalidRequest, "commit-validator: %v", err))
		return
	}
	c.Rules.mu.Lock()
	c.Rules.commit = body.Rules
	c.Rules.mu.Unlock()
	writeJSON(w, map[string]int{"rules": len(body.Rules)})
}

func (r *Rules) checkCommits(rules []CommitRule) error {
	if len(rules) > MaxRules {
		return fmt.Errorf("at most %d rules", MaxRules)
	}
	for i, rule := range rules {
		switch {
		case r.sch.Table(rule.Table) == nil:
			return fmt.Errorf("rule %d: unknown table %q", i, rule.Table)
		case len(rule.Scopes) == 0:
			return fmt.Errorf("rule %d: scopes are required", i)
		case rule.MaxRows < 0 || rule.MaxRows > 999:
			return fmt.Errorf("rule %d: maxRows must be 0-999", i)
		case rule.Reject == nil && !rule.Throw:
			return fmt.Errorf("rule %d: needs reject or throw", i)
		}
		for v, vals := range rule.Scopes {
			if len(vals) == 0 {
				return fmt.Errorf("rule %d: scope %q has no values", i, v)
			}
			if r.sch.Table(rule.Table).ScopeVar(v) == nil {
				return fmt.Errorf("rule %d: table %q has no scope variable %q", i, rule.Table, v)
			}
		}
		if err := rule.check(); err != nil {
			return fmt.Errorf("rule %d: %w", i, err)
		}
	}
	return nil
}
