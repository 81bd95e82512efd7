package testcontrol

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync"
	"unicode/utf8"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

// Declarative host hooks: a harness cannot ship Go code to the server, so
// PUT /_test/validators and PUT /_test/commit-validator install rules that
// the server's row validators and commit validator (installed at start by
// Rules.Install) evaluate. Each PUT replaces every rule of its hook and
// answers {}; a body that breaks the rules below is refused with 400
// sync.invalid_request and changes nothing. At most MaxRules rules per
// hook.
//
// PUT /_test/validators takes an array of {"table","rule":{"kind",...}}
// ([] clears). The kinds of the test-control contract:
//
//	{"kind":"maxLength","column":"title","max":20,"code":"app.title_too_long"}
//	  rejects an upsert whose candidate value of column (a string or
//	  blob_ref column) is a string of more than max characters (Unicode
//	  code points, not bytes); NULL passes. The rejection carries the
//	  details {"fieldPaths":[column],"reason":"max_length_exceeded",
//	  "requiredAction":"edit_fields"} unless "details" replaces them (as
//	  the reference's conformance driver attaches).
//	{"kind":"immutableWhen","column":"title","guardColumn":"done","guardValue":true,"code":"app.frozen"}
//	  rejects an upsert of an existing row that changes column (stored
//	  value vs candidate value) while the stored row's guardColumn equals
//	  guardValue; an insert or a delete is never rejected by it. It
//	  carries no details unless "details" gives them (the reference's
//	  driver attaches none).
//
// and synclane's further kind, the rule objects of the older body form:
//
//	{"kind":"match","op":"upsert"|"delete"?,"column"?,"equals"?,
//	 "reject"?:{"code","message"?,"details"?},"throw"?:true,
//	 "react"?:{"name","payload"?,"maxAttempts"?}}
//	  matches a write of the table (and op, and column equal to equals in
//	  the candidate row, the stored row for a delete, compared as JSON);
//	  reject rejects with that host rejection, throw fails with a plain
//	  error (sync.constraint_violation), react schedules a reaction.
//
// Every write of a table runs its rules in order: every matching react
// schedules its reaction, and the first rule that rejects decides. The
// contract kinds take "message" and "details" (PUSH_RESULT_DETAILS) next
// to "code" as options. The older body {"rules":[{"table",...match
// fields}]} is still accepted (each rule is a match rule).
//
// PUT /_test/commit-validator takes one rule object, null (clears), or an
// array of rule objects (all must pass, in order). The contract kind:
//
//	{"kind":"requireSiblingWhen","table":"tasks","column":"done","equals":true,
//	 "siblingRowIdSuffix":"-audit","code":"app.audit_required"}
//	  rejects a commit with an upsert of table whose candidate column
//	  equals equals unless the same commit also writes (upserts or
//	  deletes) the row of table whose id is that row's id + the suffix.
//	  The rejection blames the first such upsert (its opIndex) and carries
//	  the details {"fieldPaths":[column],"reason":"missing_sibling_operation",
//	  "requiredAction":"repair_aggregate"} unless "details" replaces them.
//
// and the further kind:
//
//	{"kind":"maxRows","table","scopes":{"var":["value"]},"maxRows":0-999,
//	 "reject":{...} | "throw":true}
//	  reads the candidate state inside the push transaction (at most
//	  maxRows+1 rows of table matching scopes) and fails the commit when
//	  more than maxRows rows match.
//
// The older body {"rules":[{maxRows fields without kind}]} is still
// accepted. Values (equals, guardValue) are JSON in the column's form, as
// GET /_test/rows renders them: a string, an integer, a number, a
// boolean, null, the raw text of a json column as a string, and
// {"$bytes":"<hex>"} for bytes and crdt columns; a value that is not of
// the column's type is refused.

// MaxRules bounds the rules of one hook.
const MaxRules = 64

// Rules holds the declarative rules; its methods are safe for concurrent use.
type Rules struct {
	sch    *schema.Schema
	mu     sync.RWMutex
	row    []tableRowRule // replaced whole, never changed in place
	commit []commitRule
}

// RuleVerdict is what a match or maxRows rule does: reject with a host
// code, or throw (a plain error: sync.constraint_violation).
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

// RuleReaction is a reaction a match rule schedules.
type RuleReaction struct {
	Name        string `json:"name"`
	Payload     string `json:"payload,omitempty"`
	MaxAttempts int    `json:"maxAttempts,omitempty"`
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

// rowRule is one compiled row rule of a table.
type rowRule interface {
	// apply judges a write of the rule's table: the reaction it schedules
	// (nil: none) and its rejection (nil: it accepts).
	apply(w *engine.RowWrite) (*RuleReaction, error)
}

type tableRowRule struct {
	table string
	rule  rowRule
}

// commitRule is one compiled commit rule.
type commitRule interface {
	apply(ctx context.Context, c *engine.CommitView) error
}

func (r *Rules) validateRow(_ context.Context, w *engine.RowWrite) error {
	r.mu.RLock()
	rules := r.row
	r.mu.RUnlock()
	var verdict error
	for _, tr := range rules {
		if tr.table != w.Table.Name {
			continue
		}
		react, err := tr.rule.apply(w)
		if react != nil {
			if rerr := w.React(engine.Reaction{Name: react.Name, Payload: []byte(react.Payload), MaxAttempts: react.MaxAttempts}); rerr != nil {
				return rerr
			}
		}
		if verdict == nil {
			verdict = err
		}
	}
	return verdict
}

func (r *Rules) validateCommit(ctx context.Context, c *engine.CommitView) error {
	r.mu.RLock()
	rules := r.commit
	r.mu.RUnlock()
	for _, rule := range rules {
		if err := rule.apply(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// hostCode is the host rejection of a contract kind: "code" with the
// optional "message" and "details".
type hostCode struct {
	Code    string                   `json:"code"`
	Message string                   `json:"message,omitempty"`
	Details *engine.RejectionDetails `json:"details,omitempty"`
}

func (h hostCode) rejection() *engine.Rejection {
	return &engine.Rejection{Code: h.Code, Message: h.Message, Details: h.Details}
}

func (h hostCode) check() error {
	if err := h.rejection().Check(); err != nil {
		return fmt.Errorf("code %q: %w", h.Code, err)
	}
	return nil
}

// maxLengthRule is kind maxLength.
type maxLengthRule struct {
	col int
	max int
	rej hostCode
}

func (m maxLengthRule) apply(w *engine.RowWrite) (*RuleReaction, error) {
	if w.Op != ssp2.OpUpsert {
		return nil, nil
	}
	if s, ok := valueAt(w.Row, m.col).(string); ok && utf8.RuneCountInString(s) > m.max {
		return nil, m.rej.rejection()
	}
	return nil, nil
}

// immutableWhenRule is kind immutableWhen.
type immutableWhenRule struct {
	col, guard int
	guardValue any
	rej        hostCode
}

func (m immutableWhenRule) apply(w *engine.RowWrite) (*RuleReaction, error) {
	if w.Op != ssp2.OpUpsert || w.Stored == nil {
		return nil, nil
	}
	stored := w.Stored.Values
	if engine.EqualValue(valueAt(stored, m.guard), m.guardValue) && !engine.EqualValue(valueAt(stored, m.col), valueAt(w.Row, m.col)) {
		return nil, m.rej.rejection()
	}
	return nil, nil
}

// valueAt is row[i], or nil (NULL) past the row's end.
func valueAt(row ssp2.Row, i int) any {
	if i < len(row) {
		return row[i]
	}
	return nil
}

// matchRule is kind match (and a rule of the older body form).
type matchRule struct {
	Op     string          `json:"op,omitempty"`
	Column string          `json:"column,omitempty"`
	Equals json.RawMessage `json:"equals,omitempty"`
	React  *RuleReaction   `json:"react,omitempty"`
	RuleVerdict
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

func (v RuleVerdict) check() error {
	switch {
	case v.Throw && v.Reject != nil:
		return errors.New("a rule has either reject or throw, not both")
	case v.Reject != nil:
		return hostCode(*v.Reject).check()
	}
	return nil
}

func (rule matchRule) apply(w *engine.RowWrite) (*RuleReaction, error) {
	if !rule.matches(w) {
		return nil, nil
	}
	return rule.React, rule.err("validator")
}

func (rule matchRule) matches(w *engine.RowWrite) bool {
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

func (rule matchRule) check(t *schema.Table) error {
	switch {
	case rule.Op != "" && rule.Op != "upsert" && rule.Op != "delete":
		return errors.New("op must be upsert or delete")
	case rule.Column != "" && t.Column(rule.Column) < 0:
		return fmt.Errorf("unknown column %q", rule.Column)
	case rule.Column != "" && !json.Valid(rule.Equals):
		return errors.New("a column condition needs an equals value")
	case rule.React != nil && rule.React.Name == "":
		return errors.New("react needs a name")
	}
	return rule.RuleVerdict.check()
}

// requireSiblingRule is kind requireSiblingWhen.
type requireSiblingRule struct {
	table  string
	col    int
	equals any
	suffix string
	rej    hostCode
}

func (m requireSiblingRule) apply(_ context.Context, c *engine.CommitView) error {
	var written map[string]bool
	for _, op := range c.Ops {
		if op.Table != m.table || op.Op != ssp2.OpUpsert || !engine.EqualValue(valueAt(op.Row, m.col), m.equals) {
			continue
		}
		if written == nil {
			written = map[string]bool{}
			for _, o := range c.Ops {
				if o.Table == m.table {
					written[o.RowID] = true
				}
			}
		}
		if !written[op.RowID+m.suffix] {
			rej := m.rej.rejection()
			rej.OpIndex = op.OpIndex
			return rej
		}
	}
	return nil
}

// maxRowsRule is kind maxRows (and a rule of the older body form).
type maxRowsRule struct {
	Table   string              `json:"table"`
	Scopes  map[string][]string `json:"scopes"`
	MaxRows int                 `json:"maxRows"`
	RuleVerdict
}

func (rule maxRowsRule) apply(ctx context.Context, c *engine.CommitView) error {
	rows, err := c.ScanRows(ctx, engine.ScanQuery{Table: rule.Table, Scopes: rule.Scopes, Limit: rule.MaxRows + 1})
	if err != nil {
		return err
	}
	if len(rows) > rule.MaxRows {
		return rule.err("commit-validator")
	}
	return nil
}

func (rule maxRowsRule) check(sch *schema.Schema) error {
	t := sch.Table(rule.Table)
	switch {
	case t == nil:
		return fmt.Errorf("unknown table %q", rule.Table)
	case len(rule.Scopes) == 0:
		return errors.New("scopes are required")
	case rule.MaxRows < 0 || rule.MaxRows > 999:
		return errors.New("maxRows must be 0-999")
	case rule.Reject == nil && !rule.Throw:
		return errors.New("needs reject or throw")
	}
	for v, vals := range rule.Scopes {
		if len(vals) == 0 {
			return fmt.Errorf("scope %q has no values", v)
		}
		if t.ScopeVar(v) == nil {
			return fmt.Errorf("table %q has no scope variable %q", rule.Table, v)
		}
	}
	return rule.RuleVerdict.check()
}

// putValidators replaces the row rules.
func (c Controls) putValidators(w http.ResponseWriter, r *http.Request) {
	var body json.RawMessage
	if !readJSON(w, r, &body) {
		return
	}
	rules, err := c.Rules.compileRows(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, syncerr.New(syncerr.InvalidRequest, "validators: %v", err))
		return
	}
	c.Rules.mu.Lock()
	c.Rules.row = rules
	c.Rules.mu.Unlock()
	writeJSON(w, struct{}{})
}

// compileRows reads a validators body: the contract's array or the older
// {"rules":[...]}.
func (r *Rules) compileRows(body json.RawMessage) ([]tableRowRule, error) {
	if bytes.HasPrefix(body, []byte("{")) {
		var old struct {
			Rules *[]struct {
				Table string `json:"table"`
				matchRule
			} `json:"rules"`
		}
		if err := strictJSON(body, &old); err != nil {
			return nil, err
		}
		if old.Rules == nil {
			return nil, errors.New(`the body is an array [{"table","rule":{"kind",...}}] (or {"rules":[...]})`)
		}
		if len(*old.Rules) > MaxRules {
			return nil, fmt.Errorf("at most %d rules", MaxRules)
		}
		out := make([]tableRowRule, 0, len(*old.Rules))
		for i, o := range *old.Rules {
			t := r.sch.Table(o.Table)
			if t == nil {
				return nil, fmt.Errorf("rule %d: unknown table %q", i, o.Table)
			}
			if err := o.matchRule.check(t); err != nil {
				return nil, fmt.Errorf("rule %d: %w", i, err)
			}
			out = append(out, tableRowRule{table: o.Table, rule: o.matchRule})
		}
		return out, nil
	}
	var specs []struct {
		Table string          `json:"table"`
		Rule  json.RawMessage `json:"rule"`
	}
	if err := strictJSON(body, &specs); err != nil {
		return nil, err
	}
	if specs == nil {
		return nil, errors.New(`the body is an array [{"table","rule":{"kind",...}}] (or {"rules":[...]})`)
	}
	if len(specs) > MaxRules {
		return nil, fmt.Errorf("at most %d rules", MaxRules)
	}
	out := make([]tableRowRule, 0, len(specs))
	for i, sp := range specs {
		t := r.sch.Table(sp.Table)
		if t == nil {
			return nil, fmt.Errorf("rule %d: unknown table %q", i, sp.Table)
		}
		rule, err := compileRowRule(t, sp.Rule)
		if err != nil {
			return nil, fmt.Errorf("rule %d (table %s): %w", i, sp.Table, err)
		}
		out = append(out, tableRowRule{table: t.Name, rule: rule})
	}
	return out, nil
}

func compileRowRule(t *schema.Table, raw json.RawMessage) (rowRule, error) {
	switch kind, err := kindOf(raw); {
	case err != nil:
		return nil, err
	case kind == "maxLength":
		var k struct {
			Kind   string `json:"kind"`
			Column string `json:"column"`
			Max    *int   `json:"max"`
			hostCode
		}
		if err := strictJSON(raw, &k); err != nil {
			return nil, err
		}
		col, err := column(t, "column", k.Column)
		if err != nil {
			return nil, err
		}
		if ty := t.Columns[col].Type; ty != ssp2.TypeString && ty != ssp2.TypeBlobRef {
			return nil, fmt.Errorf("maxLength: column %q is not a string column", k.Column)
		}
		if k.Max == nil || *k.Max < 0 {
			return nil, errors.New("maxLength: max must be an integer >= 0")
		}
		if k.Details == nil {
			k.Details = &engine.RejectionDetails{FieldPaths: []string{k.Column}, Reason: "max_length_exceeded", RequiredAction: "edit_fields"}
		}
		return maxLengthRule{col: col, max: *k.Max, rej: k.hostCode}, k.check()
	case kind == "immutableWhen":
		var k struct {
			Kind        string          `json:"kind"`
			Column      string          `json:"column"`
			GuardColumn string          `json:"guardColumn"`
			GuardValue  json.RawMessage `json:"guardValue"`
			hostCode
		}
		if err := strictJSON(raw, &k); err != nil {
			return nil, err
		}
		col, err := column(t, "column", k.Column)
		if err != nil {
			return nil, err
		}
		guard, err := column(t, "guardColumn", k.GuardColumn)
		if err != nil {
			return nil, err
		}
		gv, err := ruleValue(t.Columns[guard], k.GuardValue)
		if err != nil {
			return nil, fmt.Errorf("immutableWhen: guardValue: %w", err)
		}
		return immutableWhenRule{col: col, guard: guard, guardValue: gv, rej: k.hostCode}, k.check()
	case kind == "match":
		var k struct {
			Kind string `json:"kind"`
			matchRule
		}
		if err := strictJSON(raw, &k); err != nil {
			return nil, err
		}
		return k.matchRule, k.matchRule.check(t)
	default:
		return nil, fmt.Errorf("unknown row rule kind %q (maxLength, immutableWhen, match)", kind)
	}
}

// putCommitValidator replaces the commit rules.
func (c Controls) putCommitValidator(w http.ResponseWriter, r *http.Request) {
	var body json.RawMessage
	if !readJSON(w, r, &body) {
		return
	}
	rules, err := c.Rules.compileCommits(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, syncerr.New(syncerr.InvalidRequest, "commit-validator: %v", err))
		return
	}
	c.Rules.mu.Lock()
	c.Rules.commit = rules
	c.Rules.mu.Unlock()
	writeJSON(w, struct{}{})
}

// compileCommits reads a commit-validator body: null, one rule object, an
// array of them, or the older {"rules":[...]}.
func (r *Rules) compileCommits(body json.RawMessage) ([]commitRule, error) {
	var raws []json.RawMessage
	switch {
	case string(body) == "null":
		return nil, nil
	case bytes.HasPrefix(body, []byte("[")):
		if err := strictJSON(body, &raws); err != nil {
			return nil, err
		}
	default:
		var peek struct {
			Kind  *string         `json:"kind"`
			Rules json.RawMessage `json:"rules"`
		}
		if err := json.Unmarshal(body, &peek); err != nil {
			return nil, fmt.Errorf(`the body is a rule {"kind",...}, an array of rules, or null: %v`, err)
		}
		if peek.Kind == nil && peek.Rules != nil {
			return r.compileOldCommits(body)
		}
		raws = []json.RawMessage{body}
	}
	if len(raws) > MaxRules {
		return nil, fmt.Errorf("at most %d rules", MaxRules)
	}
	out := make([]commitRule, 0, len(raws))
	for i, raw := range raws {
		rule, err := r.compileCommitRule(raw)
		if err != nil {
			return nil, fmt.Errorf("rule %d: %w", i, err)
		}
		out = append(out, rule)
	}
	return out, nil
}

func (r *Rules) compileOldCommits(body json.RawMessage) ([]commitRule, error) {
	var old struct {
		Rules []maxRowsRule `json:"rules"`
	}
	if err := strictJSON(body, &old); err != nil {
		return nil, err
	}
	if len(old.Rules) > MaxRules {
		return nil, fmt.Errorf("at most %d rules", MaxRules)
	}
	out := make([]commitRule, 0, len(old.Rules))
	for i, rule := range old.Rules {
		if err := rule.check(r.sch); err != nil {
			return nil, fmt.Errorf("rule %d: %w", i, err)
		}
		out = append(out, rule)
	}
	return out, nil
}

func (r *Rules) compileCommitRule(raw json.RawMessage) (commitRule, error) {
	switch kind, err := kindOf(raw); {
	case err != nil:
		return nil, err
	case kind == "requireSiblingWhen":
		var k struct {
			Kind               string          `json:"kind"`
			Table              string          `json:"table"`
			Column             string          `json:"column"`
			Equals             json.RawMessage `json:"equals"`
			SiblingRowIDSuffix string          `json:"siblingRowIdSuffix"`
			hostCode
		}
		if err := strictJSON(raw, &k); err != nil {
			return nil, err
		}
		t := r.sch.Table(k.Table)
		if t == nil {
			return nil, fmt.Errorf("unknown table %q", k.Table)
		}
		col, err := column(t, "column", k.Column)
		if err != nil {
			return nil, err
		}
		eq, err := ruleValue(t.Columns[col], k.Equals)
		if err != nil {
			return nil, fmt.Errorf("requireSiblingWhen: equals: %w", err)
		}
		if k.SiblingRowIDSuffix == "" {
			return nil, errors.New("requireSiblingWhen: siblingRowIdSuffix must not be empty")
		}
		if k.Details == nil {
			k.Details = &engine.RejectionDetails{FieldPaths: []string{k.Column}, Reason: "missing_sibling_operation", RequiredAction: "repair_aggregate"}
		}
		return requireSiblingRule{table: t.Name, col: col, equals: eq, suffix: k.SiblingRowIDSuffix, rej: k.hostCode}, k.check()
	case kind == "maxRows":
		var k struct {
			Kind string `json:"kind"`
			maxRowsRule
		}
		if err := strictJSON(raw, &k); err != nil {
			return nil, err
		}
		return k.maxRowsRule, k.maxRowsRule.check(r.sch)
	default:
		return nil, fmt.Errorf("unknown commit rule kind %q (requireSiblingWhen, maxRows)", kind)
	}
}

// kindOf returns the "kind" of a rule object.
func kindOf(raw json.RawMessage) (string, error) {
	var k struct {
		Kind *string `json:"kind"`
	}
	if err := json.Unmarshal(raw, &k); err != nil || k.Kind == nil {
		return "", fmt.Errorf(`a rule is an object with a "kind" (%v)`, err)
	}
	return *k.Kind, nil
}

// column returns the index of column name of t (what names the field).
func column(t *schema.Table, what, name string) (int, error) {
	i := t.Column(name)
	if i < 0 {
		return 0, fmt.Errorf("%s: table %q has no column %q", what, t.Name, name)
	}
	return i, nil
}

// strictJSON decodes raw into v refusing unknown fields and trailing data.
func strictJSON(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// ruleValue decodes a rule's JSON value (equals, guardValue) into the
// Go value col holds in a decoded row (see ssp2.Row), in the form
// GET /_test/rows renders: null, a string (string, blob_ref; the raw text
// of a json column), an integer, a number, a boolean, or
// {"$bytes":"<hex>"} (bytes, crdt).
func ruleValue(col ssp2.Column, raw json.RawMessage) (any, error) {
	if len(raw) == 0 {
		return nil, errors.New("missing")
	}
	if string(raw) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	switch col.Type {
	case ssp2.TypeString, ssp2.TypeBlobRef:
		if s, ok := v.(string); ok {
			return s, nil
		}
	case ssp2.TypeJSON:
		if s, ok := v.(string); ok && json.Valid([]byte(s)) {
			return json.RawMessage(s), nil
		}
	case ssp2.TypeInteger:
		if n, ok := v.(json.Number); ok {
			if i, err := n.Int64(); err == nil && i >= -(1<<53-1) && i <= 1<<53-1 {
				return i, nil
			}
		}
	case ssp2.TypeFloat:
		if n, ok := v.(json.Number); ok {
			if f, err := n.Float64(); err == nil && !math.IsInf(f, 0) {
				return f, nil
			}
		}
	case ssp2.TypeBoolean:
		if b, ok := v.(bool); ok {
			return b, nil
		}
	case ssp2.TypeBytes, ssp2.TypeCRDT:
		if m, ok := v.(map[string]any); ok && len(m) == 1 {
			if h, ok := m["$bytes"].(string); ok {
				if b, err := hex.DecodeString(h); err == nil {
					return b, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("%s is not a value of column %q", raw, col.Name)
}
