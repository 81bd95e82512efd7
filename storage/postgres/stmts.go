package postgres

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/protocol/schema"
)

// sysSQL holds the statements on the system tables, with table names
// qualified by the store's schema.
type sysSQL struct {
	schemaIdent string // quoted schema, "" when unqualified

	meta, partitions, commits, changes, changeScopes, idempotency, clients string
	checkpoints, fence, fenceFunc                                          string
	tombstones                                                             string

	readPartition, lockPartition, insertPartition string
	claimPartition, partitionOwner, shareOwner    string
	rotate, deleteClients, setMaxSeq              string
	touchPartition                                string
	getIdem, getClient, putClient, bindClient     string
	shareEpoch, handOverClient                    string
	prefetchIdem                                  string
	getTomb, prefetchTombs, clearTomb             string
	insertCommits, insertChanges, insertScopes    string
	putIdems                                      string
	listPartitions, listPartitionInfos            string
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
		tombstones:   qualify(schema, "sync_tombstones"),
	}
	if schema != "" {
		q.schemaIdent = pgx.Identifier{schema}.Sanitize()
	}
	r := strings.NewReplacer(
		"{meta}", q.meta, "{partitions}", q.partitions, "{commits}", q.commits,
		"{changes}", q.changes, "{change_scopes}", q.changeScopes,
		"{idempotency}", q.idempotency, "{clients}", q.clients,
		"{tombstones}", q.tombstones,
	)
	const partCols = `log_epoch, epoch_required, max_commit_seq, horizon_seq`
	q.readPartition = r.Replace(`SELECT ` + partCols + ` FROM {partitions} WHERE partition = $1`)
	// The lock reads the ownership generation too (scanLocked), so a
	// fenced write checks it without a round trip of its own.
	q.lockPartition = r.Replace(`SELECT ` + partCols + `, owner_generation FROM {partitions} WHERE partition = $1 FOR UPDATE`)
	q.insertPartition = r.Replace(`INSERT INTO {partitions} (partition, log_epoch, created_at_ms) VALUES ($1, $2, $3)
ON CONFLICT (partition) DO NOTHING RETURNING ` + partCols)
	// One statement: creates the entry (fresh epoch, generation 1) or, under
	// the row lock (waiting for the transactions holding it), raises the
	// generation.
	q.claimPartition = r.Replace(`INSERT INTO {partitions} AS p (partition, log_epoch, created_at_ms, owner, owner_generation)
VALUES ($1, $2, $3, $4, 1)
ON CONFLICT (partition) DO UPDATE SET owner = EXCLUDED.owner, owner_generation = p.owner_generation + 1
RETURNING owner_generation`)
	q.partitionOwner = r.Replace(`SELECT owner, owner_generation FROM {partitions} WHERE partition = $1`)
	// The fence check of writes that take no write lock (PutClient,
	// DeclareCheckpoint): a share lock, which ClaimPartition's update waits
	// for, so the generation read stays current until they commit.
	q.shareOwner = r.Replace(`SELECT owner_generation FROM {partitions} WHERE partition = $1 FOR SHARE`)
	q.rotate = r.Replace(`UPDATE {partitions} SET log_epoch = $2, epoch_required = true WHERE partition = $1`)
	q.deleteClients = r.Replace(`DELETE FROM {clients} WHERE partition = $1`)
	q.setMaxSeq = r.Replace(`UPDATE {partitions} SET max_commit_seq = $2 WHERE partition = $1`)
	q.touchPartition = r.Replace(`UPDATE {partitions} SET max_commit_seq = max_commit_seq WHERE partition = $1`)
	q.getIdem = r.Replace(`SELECT status, commit_seq, result FROM {idempotency}
WHERE partition = $1 AND client_id = $2 AND client_commit_id = $3`)
	// One primary-key probe per key (LATERAL ... LIMIT 1 is never
	// flattened into a join), whatever the table's statistics say: a
	// generic plan built while the table was small otherwise scans the
	// whole partition.
	q.prefetchIdem = r.Replace(`SELECT k.c, k.id, i.status, i.commit_seq, i.result FROM unnest($2::text[], $3::text[]) AS k(c, id),
LATERAL (SELECT status, commit_seq, result FROM {idempotency} WHERE partition = $1 AND client_id = k.c AND client_commit_id = k.id LIMIT 1) AS i`)
	q.getTomb = r.Replace(`SELECT commit_seq FROM {tombstones} WHERE partition = $1 AND table_name = $2 AND row_id = $3`)
	// One primary-key probe per key, as prefetchIdem.
	q.prefetchTombs = r.Replace(`SELECT k.t, k.id, tb.commit_seq FROM unnest($2::text[], $3::text[]) AS k(t, id),
LATERAL (SELECT commit_seq FROM {tombstones} WHERE partition = $1 AND table_name = k.t AND row_id = k.id LIMIT 1) AS tb`)
	q.clearTomb = r.Replace(`DELETE FROM {tombstones} WHERE partition = $1 AND table_name = $2 AND row_id = $3`)
	q.getClient = r.Replace(`SELECT actor_id, subscriptions, cursor, wire_version, updated_at_ms FROM {clients}
WHERE partition = $1 AND client_id = $2`)
	q.putClient = r.Replace(`INSERT INTO {clients} (partition, client_id, actor_id, subscriptions, cursor, wire_version, updated_at_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (partition, client_id) DO UPDATE SET subscriptions = EXCLUDED.subscriptions,
cursor = EXCLUDED.cursor, wire_version = EXCLUDED.wire_version, updated_at_ms = EXCLUDED.updated_at_ms`) // actor_id is immutable
	q.shareEpoch = r.Replace(`SELECT log_epoch FROM {partitions} WHERE partition = $1 FOR SHARE`)
	// PutClient's upsert, except that an existing record is replaced only
	// when it is bound to the same actor and not newer (ClientHandOver).
	q.handOverClient = r.Replace(`INSERT INTO {clients} AS c (partition, client_id, actor_id, subscriptions, cursor, wire_version, updated_at_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (partition, client_id) DO UPDATE SET subscriptions = EXCLUDED.subscriptions,
cursor = EXCLUDED.cursor, wire_version = EXCLUDED.wire_version, updated_at_ms = EXCLUDED.updated_at_ms
WHERE c.actor_id = EXCLUDED.actor_id AND c.updated_at_ms <= EXCLUDED.updated_at_ms`)
	q.bindClient = r.Replace(`INSERT INTO {clients} (partition, client_id, actor_id, subscriptions, cursor, wire_version, updated_at_ms)
VALUES ($1, $2, $3, NULL, -1, 0, $4) ON CONFLICT (partition, client_id) DO NOTHING`)
	q.insertCommits = r.Replace(`INSERT INTO {commits} (partition, seq, created_at_ms, actor_id, client_id, client_commit_id, writer_version)
SELECT $1, u.*, $7::integer FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::text[], $6::text[]) AS u`)
	q.insertChanges = r.Replace(`INSERT INTO {changes} (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data)
SELECT $1, * FROM unnest($2::bigint[], $3::int[], $4::text[], $5::text[], $6::smallint[], $7::bigint[], $8::text[], $9::bytea[])`)
	q.insertScopes = r.Replace(`INSERT INTO {change_scopes} (partition, table_name, var, value, seq, idx)
SELECT $1, * FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::int[])`)
	q.putIdems = r.Replace(`INSERT INTO {idempotency} (partition, client_id, client_commit_id, status, commit_seq, result, log_seq)
SELECT $1, * FROM unnest($2::text[], $3::text[], $4::smallint[], $5::bigint[], $6::bytea[], $7::bigint[])
ON CONFLICT (partition, client_id, client_commit_id) DO UPDATE SET status = EXCLUDED.status,
commit_seq = EXCLUDED.commit_seq, result = EXCLUDED.result, log_seq = EXCLUDED.log_seq`)
	q.listPartitions = r.Replace(`SELECT partition, max_commit_seq FROM {partitions} ORDER BY partition`)
	q.listPartitionInfos = r.Replace(`SELECT partition, ` + partCols + ` FROM {partitions} ORDER BY partition`)
	return q
}

// tableSQL holds the statements on one synced table's row table.
type tableSQL struct {
	t          *schema.Table
	schemaName string   // the store's schema ("" for the search path)
	ident      string   // schema-qualified quoted table name
	regclass   string   // the same, as text for to_regclass
	cols       []string // quoted column names in schema order
	selectList string   // cols..., _sync_version
	get        string   // $1 partition, $2 key (keyArg)
	upsert     string   // $1 partition, $2.. values, $n+2 version, $n+3 column versions
	del        string   // $1 partition, $2 row id
	// The push transaction's reads select txSelectList (selectList, then
	// _sync_column_versions); no committed-row read does, so column
	// versions never reach a client.
	txSelectList string
	txGet        string // $1 partition, $2 key (keyArg)
	txGetMany    string // $1 partition, $2 keys (an array of the key column's type)
	// delTomb deletes the row and records its tombstone in one
	// statement: $1 partition, $2 key (keyArg), $3 table name, $4 commit
	// seq, $5 row id (the tombstone's text).
	delTomb string
}

func newTableSQL(schemaName string, t *schema.Table) *tableSQL {
	ts := &tableSQL{t: t, schemaName: schemaName, ident: qualify(schemaName, t.Name)}
	ts.regclass = ts.ident
	for _, c := range t.Columns {
		ts.cols = append(ts.cols, pgx.Identifier{c.Name}.Sanitize())
	}
	pk := ts.cols[t.PK]
	ts.selectList = strings.Join(ts.cols, ", ") + ", _sync_version"
	ts.get = fmt.Sprintf(`SELECT %s FROM %s WHERE partition_id = $1 AND %s = $2`, ts.selectList, ts.ident, pk)
	ts.txSelectList = ts.selectList + ", " + columnVersionsCol
	ts.txGet = fmt.Sprintf(`SELECT %s FROM %s WHERE partition_id = $1 AND %s = $2`, ts.txSelectList, ts.ident, pk)
	// One primary-key probe per id, as prefetchIdem.
	ts.txGetMany = fmt.Sprintf(`SELECT r.* FROM unnest($2::%s[]) AS k(id), LATERAL (SELECT %s FROM %s WHERE partition_id = $1 AND %s = k.id LIMIT 1) AS r`,
		pgType(t.Columns[t.PK].Type), ts.txSelectList, ts.ident, pk)
	ts.del = fmt.Sprintf(`DELETE FROM %s WHERE partition_id = $1 AND %s = $2`, ts.ident, pk)
	ts.delTomb = fmt.Sprintf(`WITH d AS (%s)
INSERT INTO %s AS tb (partition, table_name, row_id, commit_seq) VALUES ($1, $3, $5, $4)
ON CONFLICT (partition, table_name, row_id) DO UPDATE SET commit_seq = EXCLUDED.commit_seq`, ts.del, qualify(schemaName, "sync_tombstones"))

	var vals, sets []string
	vals = append(vals, "$1")
	for i, c := range ts.cols {
		vals = append(vals, fmt.Sprintf("$%d", i+2))
		if i != t.PK {
			sets = append(sets, fmt.Sprintf("%s = EXCLUDED.%s", c, c))
		}
	}
	vals = append(vals, fmt.Sprintf("$%d", len(ts.cols)+2), fmt.Sprintf("$%d", len(ts.cols)+3))
	sets = append(sets, "_sync_version = EXCLUDED._sync_version", columnVersionsCol+" = EXCLUDED."+columnVersionsCol)
	ts.upsert = fmt.Sprintf(`INSERT INTO %s (partition_id, %s, _sync_version, %s) VALUES (%s)
ON CONFLICT (partition_id, %s) DO UPDATE SET %s`,
		ts.ident, strings.Join(ts.cols, ", "), columnVersionsCol, strings.Join(vals, ", "), pk, strings.Join(sets, ", "))
	return ts
}
