package postgres

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// sysSQL holds the statements on the system tables, with table names
// qualified by the store's schema.
type sysSQL struct {
	schemaIdent string // quoted schema, "" when unqualified

	meta, partitions, commits, changes, changeScopes, idempotency, clients string
	checkpoints, fence, fenceFunc                                          string

	readPartition, lockPartition, insertPartition string
	rotate, deleteClients, setMaxSeq              string
	getIdem, getClient, putClient                 string
	insertCommits, insertChanges, insertScopes    string
	putIdems                                      string
	listPartitions                                string
}

// qualify returns the quoted, schema-qualified name of table.
func qualify(schema, table string) string {
	if schema == "" {
		return pgx.Identifier{table}.Sanitize()
	}
	return pgx.Identifier{schema, table}.Sanitize()
}

func newSysSQL(schema string) sysSQL {
	q := sysSQL{
		meta:         qualify(schema, "sync_schema_meta"),
		partitions:   qualify(schema, "sync_partitions"),
		commits:      qualify(schema, "sync_commits"),
		changes:      qualify(schema, "sync_changes"),
		changeScopes: qualify(schema, "sync_change_scopes"),
		idempotency:  qualify(schema, "sync_idempotency"),
		clients:      qualify(schema, "sync_clients"),
		checkpoints:  qualify(schema, "sync_backfill_checkpoints"),
		fence:        qualify(schema, "sync_writer_fence"),
		fenceFunc:    qualify(schema, "sync_writer_fence_check"),
	}
	if schema != "" {
		q.schemaIdent = pgx.Identifier{schema}.Sanitize()
	}
	r := strings.NewReplacer(
		"{meta}", q.meta, "{partitions}", q.partitions, "{commits}", q.commits,
		"{changes}", q.changes, "{change_scopes}", q.changeScopes,
		"{idempotency}", q.idempotency, "{clients}", q.clients,
	)
	const partCols = `log_epoch, epoch_required, max_commit_seq, horizon_seq`
	q.readPartition = r.Replace(`SELECT ` + partCols + ` FROM {partitions} WHERE partition = $1`)
	q.lockPartition = r.Replace(`SELECT ` + partCols + ` FROM {partitions} WHERE partition = $1 FOR UPDATE`)
	q.insertPartition = r.Replace(`INSERT INTO {partitions} (partition, log_epoch, created_at_ms) VALUES ($1, $2, $3)
ON CONFLICT (partition) DO NOTHING RETURNING ` + partCols)
	q.rotate = r.Replace(`UPDATE {partitions} SET log_epoch = $2, epoch_required = true WHERE partition = $1`)
	q.deleteClients = r.Replace(`DELETE FROM {clients} WHERE partition = $1`)
	q.setMaxSeq = r.Replace(`UPDATE {partitions} SET max_commit_seq = $2 WHERE partition = $1`)
	q.getIdem = r.Replace(`SELECT status, commit_seq, result FROM {idempotency}
WHERE partition = $1 AND client_id = $2 AND client_commit_id = $3`)
	q.getClient = r.Replace(`SELECT actor_id, subscriptions, cursor, wire_version, updated_at_ms FROM {clients}
WHERE partition = $1 AND client_id = $2`)
	q.putClient = r.Replace(`INSERT INTO {clients} (partition, client_id, actor_id, subscriptions, cursor, wire_version, updated_at_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (partition, client_id) DO UPDATE SET actor_id = EXCLUDED.actor_id, subscriptions = EXCLUDED.subscriptions,
cursor = EXCLUDED.cursor, wire_version = EXCLUDED.wire_version, updated_at_ms = EXCLUDED.updated_at_ms`)
	q.insertCommits = r.Replace(`INSERT INTO {commits} (partition, seq, created_at_ms, actor_id, client_id, client_commit_id, writer_version)
SELECT $1, u.*, $7::integer FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::text[], $6::text[]) AS u`)
	q.insertChanges = r.Replace(`INSERT INTO {changes} (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data)
SELECT $1, * FROM unnest($2::bigint[], $3::int[], $4::text[], $5::text[], $6::smallint[], $7::bigint[], $8::text[], $9::bytea[])`)
	q.insertScopes = r.Replace(`INSERT INTO {change_scopes} (partition, table_name, var, value, seq, idx)
SELECT $1, * FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::int[])`)
	q.putIdems = r.Replace(`INSERT INTO {idempotency} (partition, client_id, client_commit_id, status, commit_seq, result)
SELECT $1, * FROM unnest($2::text[], $3::text[], $4::smallint[], $5::bigint[], $6::bytea[])
ON CONFLICT (partition, client_id, client_commit_id) DO UPDATE SET status = EXCLUDED.status,
commit_seq = EXCLUDED.commit_seq, result = EXCLUDED.result`)
	q.listPartitions = r.Replace(`SELECT partition, max_commit_seq FROM {partitions} ORDER BY partition`)
	return q
}

// systemDDL returns the statements creating the system tables (storage
// layout version 1). Each is idempotent.
func (q sysSQL) systemDDL() []string {
	r := strings.NewReplacer(
		"{meta}", q.meta, "{partitions}", q.partitions, "{commits}", q.commits,
		"{changes}", q.changes, "{change_scopes}", q.changeScopes,
		"{idempotency}", q.idempotency, "{clients}", q.clients,
		"{checkpoints}", q.checkpoints, "{fence}", q.fence,
	)
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS {meta} (
	id integer PRIMARY KEY CHECK (id = 1),
	schema_version integer NOT NULL,
	storage_version integer NOT NULL
)`,
		`CREATE TABLE IF NOT EXISTS {partitions} (
	partition text COLLATE "C" PRIMARY KEY,
	log_epoch text NOT NULL,
	epoch_required boolean NOT NULL DEFAULT false,
	max_commit_seq bigint NOT NULL DEFAULT 0,
	horizon_seq bigint NOT NULL DEFAULT 0,
	created_at_ms bigint NOT NULL
)`,
		`CREATE TABLE IF NOT EXISTS {commits} (
	partition text COLLATE "C" NOT NULL,
	seq bigint NOT NULL,
	created_at_ms bigint NOT NULL,
	actor_id text NOT NULL,
	client_id text NOT NULL,
	client_commit_id text NOT NULL,
	PRIMARY KEY (partition, seq)
)`,
		`CREATE TABLE IF NOT EXISTS {changes} (
	partition text COLLATE "C" NOT NULL,
	seq bigint NOT NULL,
	idx integer NOT NULL,
	table_name text COLLATE "C" NOT NULL,
	row_id text NOT NULL,
	op smallint NOT NULL,
	row_version bigint NOT NULL,
	scopes text NOT NULL,
	row_data bytea,
	PRIMARY KEY (partition, seq, idx)
)`,
		`CREATE INDEX IF NOT EXISTS sync_changes_by_table ON {changes} (partition, table_name, seq, idx)`,
		`CREATE TABLE IF NOT EXISTS {change_scopes} (
	partition text COLLATE "C" NOT NULL,
	table_name text COLLATE "C" NOT NULL,
	var text COLLATE "C" NOT NULL,
	value text COLLATE "C" NOT NULL,
	seq bigint NOT NULL,
	idx integer NOT NULL,
	PRIMARY KEY (partition, table_name, var, value, seq, idx)
)`,
		`CREATE TABLE IF NOT EXISTS {idempotency} (
	partition text COLLATE "C" NOT NULL,
	client_id text COLLATE "C" NOT NULL,
	client_commit_id text COLLATE "C" NOT NULL,
	status smallint NOT NULL,
	commit_seq bigint NOT NULL,
	result bytea,
	PRIMARY KEY (partition, client_id, client_commit_id)
)`,
		`CREATE TABLE IF NOT EXISTS {clients} (
	partition text COLLATE "C" NOT NULL,
	client_id text COLLATE "C" NOT NULL,
	actor_id text NOT NULL,
	subscriptions text,
	cursor bigint NOT NULL,
	wire_version integer NOT NULL,
	updated_at_ms bigint NOT NULL,
	PRIMARY KEY (partition, client_id)
)`,
		`CREATE TABLE IF NOT EXISTS {checkpoints} (
	partition text COLLATE "C" NOT NULL,
	name text COLLATE "C" NOT NULL,
	schema_version integer NOT NULL,
	state text NOT NULL CHECK (state IN ('declared', 'backfilling', 'activated')),
	watermark bigint NOT NULL DEFAULT 0,
	owner_epoch bigint NOT NULL DEFAULT 0,
	observed_rows bigint NOT NULL DEFAULT 0,
	updated_at_ms bigint NOT NULL,
	PRIMARY KEY (partition, name)
)`,
		`CREATE TABLE IF NOT EXISTS {fence} (
	partition text COLLATE "C" PRIMARY KEY,
	required_writer_version integer NOT NULL
)`,
	}
	for i := range stmts {
		stmts[i] = r.Replace(stmts[i])
	}
	return stmts
}
