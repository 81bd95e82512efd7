package homes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
)

// adoptTables are the tables whose partitions a home held before it was
// a home (its database served alone, as the --postgres database did
// before --postgres-databases): every partition found in one of them is
// given a directory row naming the home.
var adoptTables = []string{"sync_partitions", "sync_clients", "sync_backfill_checkpoints", "sync_leases"}

// adoptPage is the number of partitions one adoption statement inserts.
const adoptPage = 1000

// EnsureSchema implements storage.Lifecycle. It creates the directory in
// main, checks every home's identity (stamping a new home with the
// deployment's id and its name, and refusing with ErrIdentity a database
// that serves as another home or another deployment's), gives every
// partition a home held before it was one a directory row (once per home:
// the identity records it), then runs every home's EnsureSchema with the
// declarations of its partitions (placing them), and gives every home a
// new gate generation. Declarations are validated before anything is
// touched. A home whose check finds an undeclared pending checkpoint
// (storage.ErrCheckpointIncomplete) does not stop the others: every home
// is made current, then those errors are returned together. Every home
// must be reachable.
func (h *Homes) EnsureSchema(ctx context.Context, sch *schema.Schema, decls ...storage.CheckpointDeclaration) error {
	for _, dc := range decls {
		if err := dc.Validate(); err != nil {
			return fmt.Errorf("homes: ensure schema v%d: %w", sch.Version, err)
		}
	}
	if err := h.ensureDirectory(ctx); err != nil {
		return err
	}
	h.ensured.Store(true)
	for _, hm := range h.homes {
		adopted, err := h.ensureIdentity(ctx, hm)
		if err != nil {
			return err
		}
		if !adopted {
			if err := h.adopt(ctx, hm); err != nil {
				return err
			}
		}
	}
	mine := make(map[*home][]storage.CheckpointDeclaration)
	for _, dc := range decls {
		hm, err := h.place(ctx, dc.Partition)
		if err != nil {
			return err
		}
		mine[hm] = append(mine[hm], dc)
	}
	var incomplete []error
	for _, hm := range h.homes {
		if err := hm.st.EnsureGateGeneration(ctx); err != nil {
			return h.unavailable(hm, fmt.Errorf("homes: home %q: %w", hm.name, err))
		}
		err := hm.st.EnsureSchema(ctx, sch, mine[hm]...)
		if err == nil || errors.Is(err, storage.ErrCheckpointIncomplete) {
			// The move guard (move.go), also on row tables this version added.
			if gerr := hm.st.EnsureMoveGuard(ctx); gerr != nil {
				return h.unavailable(hm, fmt.Errorf("homes: home %q: %w", hm.name, gerr))
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, storage.ErrCheckpointIncomplete):
			incomplete = append(incomplete, fmt.Errorf("home %q: %w", hm.name, err))
		default:
			return h.afterCheckpointChange(ctx, h.unavailable(hm, fmt.Errorf("homes: home %q: %w", hm.name, err)))
		}
	}
	err := h.afterCheckpointChange(ctx, errors.Join(incomplete...))
	for _, hm := range h.homes { // the first reading, which an outage of hm falls back on (gate.go)
		if _, rerr := h.readPending(ctx, hm, sch.Version); rerr != nil {
			return errors.Join(err, rerr)
		}
	}
	return err
}

// ensureDirectory creates main's schema (when named) and the directory.
func (h *Homes) ensureDirectory(ctx context.Context) error {
	m := h.main()
	stmts := []string{`CREATE TABLE IF NOT EXISTS ` + h.dir + ` (
	partition text COLLATE "C" PRIMARY KEY,
	home text COLLATE "C" NOT NULL,
	generation bigint NOT NULL,
	updated_at_ms bigint NOT NULL
)`, `CREATE INDEX IF NOT EXISTS sync_home_directory_by_home ON ` + h.dir + ` (home)`,
		// The move record (move.go): empty when no move is under way.
		`ALTER TABLE ` + h.dir + ` ADD COLUMN IF NOT EXISTS move_from text NOT NULL DEFAULT ''`,
		`ALTER TABLE ` + h.dir + ` ADD COLUMN IF NOT EXISTS move_to text NOT NULL DEFAULT ''`,
		`ALTER TABLE ` + h.dir + ` ADD COLUMN IF NOT EXISTS move_state text NOT NULL DEFAULT ''`}
	if s := m.st.SchemaName(); s != "" {
		stmts = append([]string{`CREATE SCHEMA IF NOT EXISTS ` + pgx.Identifier{s}.Sanitize()}, stmts...)
	}
	err := pgx.BeginTxFunc(ctx, m.st.Pool(), pgx.TxOptions{}, func(tx pgx.Tx) error {
		// Two processes starting at once would race on the catalog.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('synclane.home_directory:' || $1, 0))`, h.dir); err != nil {
			return err
		}
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return nil
	})
	if err != nil {
		return h.unavailable(m, fmt.Errorf("homes: create the directory: %w", err))
	}
	return nil
}

// ensureIdentity checks (stamping it when new) hm's identity and reports
// whether its partitions were adopted.
func (h *Homes) ensureIdentity(ctx context.Context, hm *home) (bool, error) {
	t := qualify(hm.st.SchemaName(), IdentityTable)
	var dep, name string
	var adopted bool
	err := pgx.BeginTxFunc(ctx, hm.st.Pool(), pgx.TxOptions{}, func(tx pgx.Tx) error {
		// Two processes starting at once would race on the catalog.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('synclane.home_identity:' || $1, 0))`, t); err != nil {
			return err
		}
		if s := hm.st.SchemaName(); s != "" {
			if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{s}.Sanitize()); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+t+` (
	id smallint PRIMARY KEY CHECK (id = 1),
	deployment text NOT NULL,
	home text NOT NULL,
	adopted boolean NOT NULL DEFAULT false
)`); err != nil {
			return err
		}
		want := h.deployment
		if hm == h.main() {
			want = storage.NewLogEpoch()
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+t+` (id, deployment, home) VALUES (1, $1, $2) ON CONFLICT (id) DO NOTHING`, want, hm.name); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT deployment, home, adopted FROM `+t+` WHERE id = 1`).Scan(&dep, &name, &adopted)
	})
	if err != nil {
		return false, h.unavailable(hm, fmt.Errorf("homes: home %q: identity: %w", hm.name, err))
	}
	if hm == h.main() {
		if name != Main {
			return false, fmt.Errorf("%w: the --postgres database serves as home %q of a deployment, not as its main database", ErrIdentity, name)
		}
		h.deployment = dep
		return adopted, nil
	}
	if dep != h.deployment || name != hm.name {
		what := fmt.Sprintf("home %q of this deployment", name)
		if dep != h.deployment {
			what = fmt.Sprintf("home %q of another deployment (%s)", name, dep)
		}
		return false, fmt.Errorf("%w: the database of home %q serves as %s", ErrIdentity, hm.name, what)
	}
	return adopted, nil
}

// adopt gives every partition hm holds a directory row naming hm (a row
// already there is kept: a partition whose data is in hm but whose row
// names another home is logged), then records the adoption.
func (h *Homes) adopt(ctx context.Context, hm *home) error {
	pool := hm.st.Pool()
	var parts []string
	for _, t := range adoptTables {
		q := qualify(hm.st.SchemaName(), t)
		var exists bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, q).Scan(&exists); err != nil {
			return h.unavailable(hm, fmt.Errorf("homes: home %q: adopt: %w", hm.name, err))
		}
		if exists {
			parts = append(parts, `SELECT partition FROM `+q)
		}
	}
	total, misplaced := 0, 0
	if len(parts) > 0 {
		union := `SELECT p FROM (SELECT DISTINCT partition AS p FROM (` + strings.Join(parts, " UNION ") + `) a) u WHERE p > $1 ORDER BY p LIMIT $2`
		after := ""
		for {
			rows, err := pool.Query(ctx, union, after, adoptPage)
			if err != nil {
				return h.unavailable(hm, fmt.Errorf("homes: home %q: adopt: %w", hm.name, err))
			}
			page, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return h.unavailable(hm, fmt.Errorf("homes: home %q: adopt: %w", hm.name, err))
			}
			if len(page) == 0 {
				break
			}
			after = page[len(page)-1]
			total += len(page)
			m := h.main().st.Pool()
			if _, err := m.Exec(ctx, `INSERT INTO `+h.dir+` (partition, home, generation, updated_at_ms)
SELECT x, $2, 1, $3 FROM unnest($1::text[]) AS x ON CONFLICT (partition) DO NOTHING`, page, hm.name, time.Now().UnixMilli()); err != nil {
				return h.unavailable(h.main(), fmt.Errorf("homes: adopt the partitions of home %q: %w", hm.name, err))
			}
			var n int
			if err := m.QueryRow(ctx, `SELECT count(*) FROM `+h.dir+` WHERE partition = ANY($1) AND home <> $2`, page, hm.name).Scan(&n); err != nil {
				return h.unavailable(h.main(), fmt.Errorf("homes: adopt the partitions of home %q: %w", hm.name, err))
			}
			misplaced += n
			if len(page) < adoptPage {
				break
			}
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE `+qualify(hm.st.SchemaName(), IdentityTable)+` SET adopted = true WHERE id = 1`); err != nil {
		return h.unavailable(hm, fmt.Errorf("homes: home %q: adopt: %w", hm.name, err))
	}
	if total > 0 {
		h.log.Info("homes: partitions held before the home had an identity adopted into the directory", zap.String("home", hm.name),
			zap.Int("partitions", total), zap.Int("named_elsewhere", misplaced))
	}
	if misplaced > 0 {
		h.log.Warn("homes: partitions with data in a home whose directory rows name another home (served from the directory's home; the data here is not read)",
			zap.String("home", hm.name), zap.Int("partitions", misplaced))
	}
	return nil
}
