package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	adminsvc "github.com/synclane/synclane/engine/admin"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/transport/admin"
)

const adminUsage = `usage: synclane admin COMMAND [flags] [args]

Reads (and two actions) against a server's admin listener (serve --admin-listen).

  overview                          server-wide view
  partitions [--after P]            partitions, name order
  clients P [CLIENT] [--after C]    clients of partition P, or one client
  commits P [--before SEQ] [--client C]   commits of P, newest first
  commit P SEQ                      one commit with its changes
  row P TABLE ID                    one row and the commits that touched it
  scopes P [--window N]             commits per scope value over the newest N commits
  events [--after SEQ] [--follow]   recent server events; --follow streams new ones
  reactions [--state S] [--partition P] [--after ID]
                                    durable reactions by id (S: pending, retrying, dead)
  rotate-epoch P                    rotate P's log epoch (every client bootstraps again)
  revoke-lease P CLIENT             revoke the client's auth lease
  redrive-reaction ID               a dead-lettered reaction pending again (full attempts)
  delete-reaction ID                remove a dead-lettered reaction for good
  maintenance [--dry-run]           run one maintenance pass now
  cluster                           cluster mode: the members as this one sees them, their
                                    health and counters, the partitions this member owns

Every command takes --url (default $SYNCLANE_ADMIN_URL or http://127.0.0.1:8788),
--token (default $SYNCLANE_ADMIN_TOKEN), --json (print the API's JSON) and --limit N
(page size, default 50, at most 500). Exit status: 0 done, 1 the server refused or
failed (the reason is printed), 2 bad usage.
`

// adminCLI is one `synclane admin` invocation.
type adminCLI struct {
	url, token string
	json       bool
	limit      int
	http       *http.Client
	stdout     io.Writer
}

// adminError is a refusal of the admin API, in words.
type adminError struct {
	status        int
	code, message string
}

func (e *adminError) Error() string {
	return fmt.Sprintf("%s (%s, HTTP %d)", e.message, e.code, e.status)
}

func adminCmd(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, adminUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd := args[0]
	c := &adminCLI{http: &http.Client{}, stdout: stdout}
	fs := flag.NewFlagSet("synclane admin "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, adminUsage) }
	defURL := "http://127.0.0.1:8788"
	if v, ok := lookup("SYNCLANE_ADMIN_URL"); ok && v != "" {
		defURL = v
	}
	defToken, _ := lookup(adminTokenEnv)
	fs.StringVar(&c.url, "url", defURL, "admin listener URL")
	fs.StringVar(&c.token, "token", defToken, "admin token")
	fs.BoolVar(&c.json, "json", false, "print JSON")
	fs.IntVar(&c.limit, "limit", 0, "page size (default 50, at most 500)")
	after := fs.String("after", "", "cursor: list entries after this one")
	before := fs.String("before", "", "cursor: commits below this seq")
	client := fs.String("client", "", "only this client's commits")
	window := fs.Int("window", 0, "commits counted by scopes (default 1000)")
	follow := fs.Bool("follow", false, "events: keep streaming new events")
	dry := fs.Bool("dry-run", false, "maintenance: only plan")
	state := fs.String("state", "", "reactions: pending, retrying or dead (default all)")
	inPartition := fs.String("partition", "", "reactions: only this partition's")
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	need := func(n int, what string) bool {
		if len(pos) != n {
			fmt.Fprintf(stderr, "synclane admin %s: want %s, got %d arguments\n", cmd, what, len(pos))
			return false
		}
		return true
	}
	if c.token == "" {
		fmt.Fprintf(stderr, "synclane admin: no admin token: pass --token or set $%s\n", adminTokenEnv)
		return 2
	}
	q := url.Values{}
	if c.limit > 0 {
		q.Set("limit", strconv.Itoa(c.limit))
	}
	p := func(i int) string { return url.PathEscape(pos[i]) }
	switch cmd {
	case "overview":
		if !need(0, "no arguments") {
			return 2
		}
		err = c.show(ctx, "GET", "api/overview", nil, printOverview)
	case "cluster":
		if !need(0, "no arguments") {
			return 2
		}
		err = c.cluster(ctx)
	case "partitions":
		if !need(0, "no arguments") {
			return 2
		}
		q.Set("after", *after)
		err = c.show(ctx, "GET", "api/partitions", q, printPartitions)
	case "clients":
		switch len(pos) {
		case 1:
			q.Set("after", *after)
			err = c.show(ctx, "GET", "api/partitions/"+p(0)+"/clients", q, printClients)
		case 2:
			err = c.show(ctx, "GET", "api/partitions/"+p(0)+"/clients/"+p(1), nil, printClient)
		default:
			need(1, "PARTITION [CLIENT]")
			return 2
		}
	case "commits":
		if !need(1, "PARTITION") {
			return 2
		}
		q.Set("before", *before)
		q.Set("client", *client)
		err = c.show(ctx, "GET", "api/partitions/"+p(0)+"/commits", q, printCommits)
	case "commit":
		if !need(2, "PARTITION SEQ") {
			return 2
		}
		err = c.show(ctx, "GET", "api/partitions/"+p(0)+"/commits/"+p(1), nil, printCommit)
	case "row":
		if !need(3, "PARTITION TABLE ID") {
			return 2
		}
		err = c.show(ctx, "GET", "api/partitions/"+p(0)+"/rows/"+p(1)+"/"+p(2), q, printRow)
	case "scopes":
		if !need(1, "PARTITION") {
			return 2
		}
		if *window > 0 {
			q.Set("window", strconv.Itoa(*window))
		}
		err = c.show(ctx, "GET", "api/partitions/"+p(0)+"/scopes", q, printScopes)
	case "events":
		if !need(0, "no arguments") {
			return 2
		}
		if *follow {
			err = c.follow(ctx, *after)
		} else {
			q.Set("after", *after)
			err = c.show(ctx, "GET", "api/events", q, printEvents)
		}
	case "rotate-epoch":
		if !need(1, "PARTITION") {
			return 2
		}
		err = c.show(ctx, "POST", "api/partitions/"+p(0)+"/rotate-epoch", nil, func(w io.Writer, b []byte) error {
			var v map[string]string
			if err := json.Unmarshal(b, &v); err != nil {
				return err
			}
			fmt.Fprintf(w, "partition %s: new log epoch %s (every client bootstraps again)\n", v["partition"], v["logEpoch"])
			return nil
		})
	case "reactions":
		if !need(0, "no arguments") {
			return 2
		}
		q.Set("after", *after)
		q.Set("state", *state)
		q.Set("partition", *inPartition)
		err = c.show(ctx, "GET", "api/reactions", q, printReactions)
	case "redrive-reaction", "delete-reaction":
		if !need(1, "REACTION-ID") {
			return 2
		}
		action := strings.TrimSuffix(cmd, "-reaction")
		err = c.show(ctx, "POST", "api/reactions/"+p(0)+"/"+action, nil, func(w io.Writer, b []byte) error {
			fmt.Fprintf(w, "reaction %s: %s done\n", pos[0], action)
			return nil
		})
	case "revoke-lease":
		if !need(2, "PARTITION CLIENT") {
			return 2
		}
		err = c.show(ctx, "POST", "api/partitions/"+p(0)+"/clients/"+p(1)+"/revoke-lease", nil, func(w io.Writer, b []byte) error {
			var v map[string]string
			if err := json.Unmarshal(b, &v); err != nil {
				return err
			}
			fmt.Fprintf(w, "partition %s client %s: auth lease %s revoked\n", v["partition"], v["clientId"], v["leaseId"])
			return nil
		})
	case "maintenance":
		if !need(0, "no arguments") {
			return 2
		}
		if *dry {
			q.Set("dryRun", "true")
		}
		err = c.show(ctx, "POST", "api/maintenance", q, printMaintenance)
	default:
		fmt.Fprintf(stderr, "synclane admin: unknown command %q\n\n%s", cmd, adminUsage)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "synclane admin:", err)
		return 1
	}
	return 0
}

// parseInterleaved parses flags that may come before, between or after
// positional arguments, returning the positional ones.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// call sends one API request and returns the body of a 2xx answer; any
// other answer becomes an *adminError with the server's words.
func (c *adminCLI) call(ctx context.Context, method, path string, q url.Values) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	u := strings.TrimRight(c.url, "/") + "/" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	res, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the admin listener at %s did not answer: %w", c.url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if res.StatusCode/100 != 2 {
		var eb struct {
			Error struct{ Code, Message string }
		}
		if json.Unmarshal(b, &eb) != nil || eb.Error.Code == "" {
			return nil, &adminError{status: res.StatusCode, code: "http." + strconv.Itoa(res.StatusCode), message: strings.TrimSpace(string(b))}
		}
		return nil, &adminError{status: res.StatusCode, code: eb.Error.Code, message: eb.Error.Message}
	}
	return b, nil
}

// show calls the API and prints the answer: as JSON with --json, else
// with print.
func (c *adminCLI) show(ctx context.Context, method, path string, q url.Values, print func(io.Writer, []byte) error) error {
	b, err := c.call(ctx, method, path, q)
	if err != nil {
		return err
	}
	if c.json {
		if !strings.HasSuffix(string(b), "\n") {
			b = append(b, '\n')
		}
		_, err := c.stdout.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 2, 4, 2, ' ', 0)
	if err := print(tw, b); err != nil {
		return fmt.Errorf("unexpected answer: %w", err)
	}
	return tw.Flush()
}

// follow streams events (SSE) until ctx ends or the server closes.
func (c *adminCLI) follow(ctx context.Context, after string) error {
	u := strings.TrimRight(c.url, "/") + "/api/events/stream"
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if after != "" {
		req.Header.Set("Last-Event-ID", after)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("the admin listener at %s did not answer: %w", c.url, err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		b, _ := io.ReadAll(res.Body)
		var eb struct {
			Error struct{ Code, Message string }
		}
		_ = json.Unmarshal(b, &eb)
		return &adminError{status: res.StatusCode, code: eb.Error.Code, message: eb.Error.Message}
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if c.json {
			fmt.Fprintln(c.stdout, data)
			continue
		}
		var ev events.Event
		if json.Unmarshal([]byte(data), &ev) != nil || ev.Seq == 0 {
			fmt.Fprintln(c.stdout, "(stream)", data)
			continue
		}
		fmt.Fprintln(c.stdout, eventLine(ev))
	}
	if ctx.Err() != nil {
		return nil
	}
	return sc.Err()
}

func eventLine(e events.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  #%d  %-24s", e.At.Local().Format("2006-01-02 15:04:05"), e.Seq, e.Kind)
	if e.Partition != "" {
		fmt.Fprintf(&b, " partition=%s", e.Partition)
	}
	if e.Actor != "" {
		fmt.Fprintf(&b, " actor=%s", e.Actor)
	}
	if e.Code != "" {
		fmt.Fprintf(&b, " code=%s", e.Code)
	}
	if e.DurationMs > 0 {
		fmt.Fprintf(&b, " took=%s", time.Duration(e.DurationMs*float64(time.Millisecond)).Round(time.Millisecond))
	}
	if e.Message != "" {
		fmt.Fprintf(&b, "  %s", e.Message)
	}
	return b.String()
}

// localTime formats a Unix millisecond time in the local zone ("-" for 0).
func localTime(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).Local().Format("2006-01-02 15:04:05")
}

func nextLine(w io.Writer, next, flagName string) {
	if next != "" {
		fmt.Fprintf(w, "\n(more: --%s %s)\n", flagName, next)
	}
}

func printOverview(w io.Writer, b []byte) error {
	var o adminsvc.Overview
	if err := json.Unmarshal(b, &o); err != nil {
		return err
	}
	gate := "open"
	if !o.Ready {
		gate = "closed: " + o.ReadyError
	}
	fmt.Fprintf(w, "schema version\t%d\n", o.SchemaVersion)
	fmt.Fprintf(w, "serve gate\t%s\n", gate)
	fmt.Fprintf(w, "retention\tactive window %s, force after %s, keep %d commits\n",
		time.Duration(o.Retention.ActiveWindowMs)*time.Millisecond, time.Duration(o.Retention.AgeForceMs)*time.Millisecond, o.Retention.MinRetainedCommits)
	fmt.Fprintf(w, "checkpoints\t%d\n", len(o.Checkpoints))
	for _, s := range o.Sections {
		fmt.Fprintf(w, "section %s\t", s.Name)
		if s.Error != "" {
			fmt.Fprintf(w, "error: %s\n", s.Error)
			continue
		}
		j, _ := json.Marshal(s.Stats)
		fmt.Fprintf(w, "%s\n", j)
	}
	return nil
}

func printPartitions(w io.Writer, b []byte) error {
	var pg adminsvc.Page[adminsvc.PartitionView]
	if err := json.Unmarshal(b, &pg); err != nil {
		return err
	}
	fmt.Fprintln(w, "PARTITION\tMAX SEQ\tHORIZON\tCLIENTS\tACTOR\tLAST ACTIVITY\tLOG EPOCH")
	for _, p := range pg.Items {
		live := "passivated"
		switch {
		case p.OwnedElsewhere && p.Owner != "":
			live = "owned by member " + p.Owner
		case p.OwnedElsewhere:
			live = "no owner (no live member)"
		case p.Live:
			live = "live"
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\t%s\t%s\n", p.Partition, p.MaxSeq, p.Horizon, p.Clients, live, localTime(p.LastActivityMs), p.LogEpoch)
	}
	nextLine(w, pg.Next, "after")
	return nil
}

func printClients(w io.Writer, b []byte) error {
	var pg adminsvc.Page[adminsvc.ClientView]
	if err := json.Unmarshal(b, &pg); err != nil {
		return err
	}
	fmt.Fprintln(w, "CLIENT\tACTOR\tCURSOR\tSUBSCRIPTIONS\tWIRE\tLAST SEEN")
	for _, c := range pg.Items {
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\tv%d\t%s\n", c.ClientID, c.Actor, c.Cursor, c.SubscriptionCount, c.WireVersion, localTime(c.LastSeenMs))
	}
	nextLine(w, pg.Next, "after")
	return nil
}

func printClient(w io.Writer, b []byte) error {
	var c adminsvc.ClientView
	if err := json.Unmarshal(b, &c); err != nil {
		return err
	}
	fmt.Fprintf(w, "client\t%s\nactor\t%s\ncursor\t%d\nwire version\tv%d\nlast seen\t%s\nsubscriptions\t%s\n",
		c.ClientID, c.Actor, c.Cursor, c.WireVersion, localTime(c.LastSeenMs), c.Subscriptions)
	if l := c.Lease; l != nil {
		status := "expires " + localTime(l.ExpiresAtMs)
		if l.RevokedAtMs != 0 {
			status = "revoked " + localTime(l.RevokedAtMs)
		}
		fmt.Fprintf(w, "auth lease\t%s (%s)\nlease scopes\t%s\n", l.LeaseID, status, l.AllowedScopes)
	}
	return nil
}

func printReactions(w io.Writer, b []byte) error {
	var v adminsvc.ReactionsView
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if !v.Enabled {
		fmt.Fprintln(w, "reactions are off (no reaction handlers)")
		return nil
	}
	fmt.Fprintf(w, "stored: %d pending, %d dead-lettered; this process: %d delivered, %d retried, %d dead-lettered\n\n",
		v.Stats.Pending, v.Stats.Dead, v.Stats.Delivered, v.Stats.Retried, v.Stats.DeadLettered)
	fmt.Fprintln(w, "ID\tPARTITION\tCOMMIT\tNAME\tSTATE\tATTEMPTS\tNEXT ATTEMPT\tLAST ERROR")
	for _, r := range v.Items {
		next := localTime(r.NextAttemptAtMs)
		if r.State == "dead" {
			next = "-"
		}
		fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%s\t%d/%d\t%s\t%s\n", r.ID, r.Partition, r.CommitSeq, r.Name, r.State, r.Attempts, r.MaxAttempts, next, r.LastError)
	}
	nextLine(w, v.Next, "after")
	return nil
}

func rowRefs(rs []adminsvc.RowRef, total int) string {
	var parts []string
	for _, r := range rs {
		s := r.Table + "/" + r.RowID
		if r.Op == "delete" {
			s += " (deleted)"
		}
		parts = append(parts, s)
	}
	if total > len(rs) {
		parts = append(parts, fmt.Sprintf("… %d more", total-len(rs)))
	}
	return strings.Join(parts, ", ")
}

func printCommits(w io.Writer, b []byte) error {
	var pg adminsvc.Page[adminsvc.CommitView]
	if err := json.Unmarshal(b, &pg); err != nil {
		return err
	}
	fmt.Fprintln(w, "SEQ\tTIME\tACTOR\tCLIENT\tCHANGES\tROWS")
	for _, c := range pg.Items {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%s\n", c.Seq, localTime(c.CreatedAtMs), c.Actor, c.ClientID, c.Changes, rowRefs(c.Rows, c.Changes))
	}
	nextLine(w, pg.Next, "before")
	return nil
}

func printCommit(w io.Writer, b []byte) error {
	var d adminsvc.CommitDetail
	if err := json.Unmarshal(b, &d); err != nil {
		return err
	}
	fmt.Fprintf(w, "commit\t%d\ntime\t%s\nactor\t%s\nclient\t%s\nclient commit id\t%s\nchanges\t%d\n\n",
		d.Seq, localTime(d.CreatedAtMs), d.Actor, d.ClientID, d.ClientCommitID, d.Changes)
	fmt.Fprintln(w, "OP\tTABLE\tROW\tVERSION\tVALUES")
	for _, ch := range d.ChangeList {
		vals := ""
		if ch.Row != nil {
			j, _ := json.Marshal(ch.Row)
			vals = string(j)
		}
		if ch.RowError != "" {
			vals = "error: " + ch.RowError
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", ch.Op, ch.Table, ch.RowID, ch.RowVersion, vals)
	}
	return nil
}

func printRow(w io.Writer, b []byte) error {
	var d adminsvc.RowDetail
	if err := json.Unmarshal(b, &d); err != nil {
		return err
	}
	fmt.Fprintf(w, "row\t%s/%s\n", d.Table, d.RowID)
	if d.Exists {
		j, _ := json.Marshal(d.Values)
		fmt.Fprintf(w, "version\t%d\nvalues\t%s\n", d.Version, j)
	} else {
		fmt.Fprintln(w, "stored\tno (deleted)")
	}
	sc, _ := json.Marshal(d.Scopes)
	fmt.Fprintf(w, "scopes\t%s\n", sc)
	for _, bv := range d.Blobs {
		rows := make([]string, 0, len(bv.Rows))
		for _, r := range bv.Rows {
			rows = append(rows, r.Table+"/"+r.RowID)
		}
		fmt.Fprintf(w, "blob %s\t%s %s, %d bytes %s; referenced by %s\n", bv.Column, bv.BlobID, bv.State, bv.ByteLength, bv.MediaType, strings.Join(rows, ", "))
	}
	fmt.Fprintln(w)
	scope := fmt.Sprintf("newest %d commits looked at", d.ScannedCommits)
	if d.Complete {
		scope = fmt.Sprintf("whole retained log, %d commits", d.ScannedCommits)
	}
	fmt.Fprintf(w, "history (%s):\n", scope)
	fmt.Fprintln(w, "SEQ\tTIME\tACTOR\tCLIENT\tOP\tVERSION")
	for _, h := range d.History {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%d\n", h.Seq, localTime(h.CreatedAtMs), h.Actor, h.ClientID, h.Change.Op, h.Change.RowVersion)
	}
	return nil
}

func printScopes(w io.Writer, b []byte) error {
	var a adminsvc.ScopeActivity
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	fmt.Fprintf(w, "%d commits (seq %d..%d, %s .. %s)\n\n", a.ScannedCommits, a.FromSeq, a.ToSeq, localTime(a.FromMs), localTime(a.ToMs))
	fmt.Fprintln(w, "VAR\tVALUE\tCOMMITS\tCHANGES\tLAST")
	for _, v := range a.Values {
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\n", v.Var, v.Value, v.Commits, v.Changes, localTime(v.LastMs))
	}
	if a.Truncated {
		fmt.Fprintf(w, "(only the %d busiest values)\n", len(a.Values))
	}
	return nil
}

func printEvents(w io.Writer, b []byte) error {
	var v struct {
		Items []events.Event `json:"items"`
		Stats events.Stats   `json:"stats"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	for _, e := range v.Items {
		fmt.Fprintln(w, eventLine(e))
	}
	fmt.Fprintf(w, "(%d events kept of %d emitted; ring of %d)\n", v.Stats.Retained, v.Stats.Emitted, v.Stats.Size)
	return nil
}

func printMaintenance(w io.Writer, b []byte) error {
	var m adminsvc.MaintenanceView
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	if m.Skipped {
		fmt.Fprintln(w, "skipped: another maintenance pass holds the lock")
		return nil
	}
	what := "pruned"
	if m.DryRun {
		what = "would prune (dry run)"
	}
	fmt.Fprintf(w, "checked %d partitions in %s; %d segments expired\n", m.Checked, time.Duration(m.TookMs*float64(time.Millisecond)).Round(time.Millisecond), m.SegmentsExpired)
	for _, p := range m.Pruned {
		fmt.Fprintf(w, "%s\t%s %d commits, horizon %d\n", p.Partition, what, p.Commits, p.Horizon)
	}
	return nil
}

// cluster prints GET /api/cluster (raw with --json) and, as tables, the
// partitions this member owns (GET /api/cluster/partitions). A server
// not in cluster mode is told apart from other refusals.
func (c *adminCLI) cluster(ctx context.Context) error {
	b, err := c.call(ctx, "GET", "api/cluster", nil)
	var ae *adminError
	if errors.As(err, &ae) && ae.status == http.StatusNotFound {
		return fmt.Errorf("this server does not run in cluster mode (serve --cluster-etcd): %w", err)
	}
	if err != nil {
		return err
	}
	if c.json {
		_, err := fmt.Fprintf(c.stdout, "%s\n", strings.TrimRight(string(b), "\n"))
		return err
	}
	var own *adminsvc.OwnershipView
	if ob, err := c.call(ctx, "GET", "api/cluster/partitions", nil); err == nil {
		own = &adminsvc.OwnershipView{}
		if json.Unmarshal(ob, own) != nil {
			own = nil
		}
	}
	tw := tabwriter.NewWriter(c.stdout, 2, 4, 2, ' ', 0)
	if err := printCluster(tw, b, own); err != nil {
		return fmt.Errorf("unexpected answer: %w", err)
	}
	return tw.Flush()
}

// printCluster prints a cluster view: this member, one line per member
// (its own health, view and counters as it reported them), this member's
// calls by kind, and the partitions it owns when own is known.
func printCluster(w io.Writer, b []byte, own *adminsvc.OwnershipView) error {
	var v admin.ClusterView
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	health := "healthy"
	if !v.Healthy {
		health = "unhealthy (its membership lease is not known alive)"
	}
	if v.Leaving {
		health += ", leaving"
	}
	fmt.Fprintf(w, "member\t%s\n", v.Self)
	fmt.Fprintf(w, "health\t%s\n", health)
	if own != nil {
		fmt.Fprintf(w, "partitions owned\t%d of %d registered\n", own.Owned, own.Partitions)
	}
	shares := map[string]int{}
	if own != nil {
		for _, m := range own.Members {
			shares[m.Member] = m.Partitions
		}
	}
	ids := make([]string, len(v.Members))
	for i, m := range v.Members {
		ids[i] = m.ID
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "MEMBER\tSTARTED\tINCARNATION\tANSWERING\tHEALTHY\tITS VIEW\tPARTITIONS\tFORWARDED\tSERVED\tRETRIES\tUNAVAILABLE\tOWNERSHIP LOST\tEVICTIONS")
	for _, m := range v.Members {
		id := m.ID
		if m.Self {
			id += " (this member)"
		}
		parts := "-"
		if own != nil {
			parts = strconv.Itoa(shares[m.ID])
		}
		st := m.Stats
		if st == nil {
			fmt.Fprintf(w, "%s\t%s\t%s\tno: %s\t-\t-\t%s\t-\t-\t-\t-\t-\t-\n", id, localTime(m.StartedAtMs), m.Incarnation, m.Error, parts)
			continue
		}
		healthy := "yes"
		if !st.Healthy {
			healthy = "no"
		}
		if st.Leaving {
			healthy += ", leaving"
		}
		view := "same"
		theirs := make([]string, len(st.Members))
		for i, x := range st.Members {
			theirs[i] = x.ID
		}
		if strings.Join(theirs, " ") != strings.Join(ids, " ") {
			view = "differs: " + strings.Join(theirs, " ")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\tyes\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", id, localTime(m.StartedAtMs), m.Incarnation, healthy, view, parts,
			sumCounts(st.Forwarded), sumCounts(st.Served), st.Retries, st.Unavailable, st.OwnershipLost, st.Evictions)
	}
	calls := make([]string, 0, len(v.Forwarded))
	for k := range v.Forwarded {
		calls = append(calls, k)
	}
	for k := range v.Served {
		if _, ok := v.Forwarded[k]; !ok {
			calls = append(calls, k)
		}
	}
	sort.Strings(calls)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "CALL (THIS MEMBER)\tFORWARDED\tSERVED")
	for _, k := range calls {
		fmt.Fprintf(w, "%s\t%d\t%d\n", k, v.Forwarded[k], v.Served[k])
	}
	if own != nil && len(own.OwnedList) > 0 {
		more := ""
		if own.OwnedTruncated {
			more = fmt.Sprintf(" (the first %d)", len(own.OwnedList))
		}
		fmt.Fprintf(w, "\nowned here%s\t%s\n", more, strings.Join(own.OwnedList, " "))
	}
	return nil
}

func sumCounts(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}
