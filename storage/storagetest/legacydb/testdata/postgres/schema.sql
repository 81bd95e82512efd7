-- The PostgreSQL schema `synclane serve --postgres` of branch main (commit
-- 8c41686, before column versions and delete tombstones) wrote for the
-- script of ../generate/main.go, plus a test-control capture of partition
-- "default"; dumped with pg_dump 15 (--column-inserts --no-owner
-- --no-privileges), session settings and psql meta-commands removed. The
-- schema name v2fixture_src is replaced by the loading test's own schema.

CREATE FUNCTION v2fixture_src.sync_writer_fence_check() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM "sync_writer_fence" f WHERE f.partition = NEW.partition
			AND (NEW.writer_version IS NULL OR NEW.writer_version < f.required_writer_version)) THEN
		RAISE EXCEPTION USING ERRCODE = 'SL001', MESSAGE = 'sync.storage.writer_fence_rejected';
	END IF;
	RETURN NEW;
END
$$;

CREATE TABLE v2fixture_src.sync_backfill_checkpoints (
    partition text NOT NULL COLLATE pg_catalog."C",
    name text NOT NULL COLLATE pg_catalog."C",
    schema_version integer NOT NULL,
    state text NOT NULL,
    watermark bigint DEFAULT 0 NOT NULL,
    owner_epoch bigint DEFAULT 0 NOT NULL,
    observed_rows bigint DEFAULT 0 NOT NULL,
    updated_at_ms bigint NOT NULL,
    CONSTRAINT sync_backfill_checkpoints_state_check CHECK ((state = ANY (ARRAY['declared'::text, 'backfilling'::text, 'activated'::text])))
);

CREATE TABLE v2fixture_src.sync_blob_chunks (
    blob_id text NOT NULL COLLATE pg_catalog."C",
    idx integer NOT NULL,
    data bytea NOT NULL
);
ALTER TABLE ONLY v2fixture_src.sync_blob_chunks ALTER COLUMN data SET STORAGE EXTERNAL;

CREATE TABLE v2fixture_src.sync_blob_objects (
    blob_id text NOT NULL COLLATE pg_catalog."C",
    byte_length bigint NOT NULL
);

CREATE TABLE v2fixture_src.sync_blob_refs (
    partition text NOT NULL COLLATE pg_catalog."C",
    table_name text NOT NULL COLLATE pg_catalog."C",
    row_id text NOT NULL COLLATE pg_catalog."C",
    blob_id text NOT NULL COLLATE pg_catalog."C",
    scopes text NOT NULL
);

CREATE TABLE v2fixture_src.sync_blobs (
    blob_id text NOT NULL COLLATE pg_catalog."C",
    byte_length bigint DEFAULT 0 NOT NULL,
    media_type text DEFAULT ''::text NOT NULL,
    state smallint NOT NULL,
    created_at_ms bigint NOT NULL,
    touched_at_ms bigint NOT NULL
);

CREATE TABLE v2fixture_src.sync_change_scopes (
    partition text NOT NULL COLLATE pg_catalog."C",
    table_name text NOT NULL COLLATE pg_catalog."C",
    var text NOT NULL COLLATE pg_catalog."C",
    value text NOT NULL COLLATE pg_catalog."C",
    seq bigint NOT NULL,
    idx integer NOT NULL
);

CREATE TABLE v2fixture_src.sync_changes (
    partition text NOT NULL COLLATE pg_catalog."C",
    seq bigint NOT NULL,
    idx integer NOT NULL,
    table_name text NOT NULL COLLATE pg_catalog."C",
    row_id text NOT NULL,
    op smallint NOT NULL,
    row_version bigint NOT NULL,
    scopes text NOT NULL,
    row_data bytea
);

CREATE TABLE v2fixture_src.sync_clients (
    partition text NOT NULL COLLATE pg_catalog."C",
    client_id text NOT NULL COLLATE pg_catalog."C",
    actor_id text NOT NULL,
    subscriptions text,
    cursor bigint NOT NULL,
    wire_version integer NOT NULL,
    updated_at_ms bigint NOT NULL
);

CREATE TABLE v2fixture_src.sync_commits (
    partition text NOT NULL COLLATE pg_catalog."C",
    seq bigint NOT NULL,
    created_at_ms bigint NOT NULL,
    actor_id text NOT NULL,
    client_id text NOT NULL,
    client_commit_id text NOT NULL,
    writer_version integer
);

CREATE TABLE v2fixture_src.sync_idempotency (
    partition text NOT NULL COLLATE pg_catalog."C",
    client_id text NOT NULL COLLATE pg_catalog."C",
    client_commit_id text NOT NULL COLLATE pg_catalog."C",
    status smallint NOT NULL,
    commit_seq bigint NOT NULL,
    result bytea,
    log_seq bigint DEFAULT 0 NOT NULL
);

CREATE TABLE v2fixture_src.sync_leases (
    partition text NOT NULL COLLATE pg_catalog."C",
    client_id text NOT NULL COLLATE pg_catalog."C",
    lease_id text NOT NULL COLLATE pg_catalog."C",
    actor_id text NOT NULL,
    allowed_scopes bytea NOT NULL,
    issued_at_ms bigint NOT NULL,
    expires_at_ms bigint NOT NULL,
    revoked_at_ms bigint DEFAULT 0 NOT NULL,
    mac bytea NOT NULL
);

CREATE TABLE v2fixture_src.sync_partitions (
    partition text NOT NULL COLLATE pg_catalog."C",
    log_epoch text NOT NULL,
    epoch_required boolean DEFAULT false NOT NULL,
    max_commit_seq bigint DEFAULT 0 NOT NULL,
    horizon_seq bigint DEFAULT 0 NOT NULL,
    created_at_ms bigint NOT NULL,
    owner text DEFAULT ''::text NOT NULL,
    owner_generation bigint DEFAULT 0 NOT NULL
);

CREATE TABLE v2fixture_src.sync_reactions (
    id bigint NOT NULL,
    partition text NOT NULL COLLATE pg_catalog."C",
    commit_seq bigint NOT NULL,
    name text NOT NULL,
    payload bytea NOT NULL,
    max_attempts integer NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    state smallint DEFAULT 0 NOT NULL,
    next_attempt_at_ms bigint NOT NULL,
    last_error text DEFAULT ''::text NOT NULL,
    created_at_ms bigint NOT NULL,
    updated_at_ms bigint NOT NULL
);

ALTER TABLE v2fixture_src.sync_reactions ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME v2fixture_src.sync_reactions_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE v2fixture_src.sync_schema_meta (
    id integer NOT NULL,
    schema_version integer NOT NULL,
    storage_version integer NOT NULL,
    schema_fingerprint text,
    CONSTRAINT sync_schema_meta_id_check CHECK ((id = 1))
);

CREATE TABLE v2fixture_src.sync_snapshot__sync_blob_refs (
    partition text NOT NULL COLLATE pg_catalog."C",
    table_name text NOT NULL COLLATE pg_catalog."C",
    row_id text NOT NULL COLLATE pg_catalog."C",
    blob_id text NOT NULL COLLATE pg_catalog."C",
    scopes text NOT NULL
);

CREATE TABLE v2fixture_src.sync_snapshot__sync_change_scopes (
    partition text NOT NULL COLLATE pg_catalog."C",
    table_name text NOT NULL COLLATE pg_catalog."C",
    var text NOT NULL COLLATE pg_catalog."C",
    value text NOT NULL COLLATE pg_catalog."C",
    seq bigint NOT NULL,
    idx integer NOT NULL
);

CREATE TABLE v2fixture_src.sync_snapshot__sync_changes (
    partition text NOT NULL COLLATE pg_catalog."C",
    seq bigint NOT NULL,
    idx integer NOT NULL,
    table_name text NOT NULL COLLATE pg_catalog."C",
    row_id text NOT NULL,
    op smallint NOT NULL,
    row_version bigint NOT NULL,
    scopes text NOT NULL,
    row_data bytea
);

CREATE TABLE v2fixture_src.sync_snapshot__sync_commits (
    partition text NOT NULL COLLATE pg_catalog."C",
    seq bigint NOT NULL,
    created_at_ms bigint NOT NULL,
    actor_id text NOT NULL,
    client_id text NOT NULL,
    client_commit_id text NOT NULL,
    writer_version integer
);

CREATE TABLE v2fixture_src.sync_snapshot__sync_idempotency (
    partition text NOT NULL COLLATE pg_catalog."C",
    client_id text NOT NULL COLLATE pg_catalog."C",
    client_commit_id text NOT NULL COLLATE pg_catalog."C",
    status smallint NOT NULL,
    commit_seq bigint NOT NULL,
    result bytea,
    log_seq bigint NOT NULL
);

CREATE TABLE v2fixture_src.sync_snapshot__sync_partitions (
    partition text NOT NULL COLLATE pg_catalog."C",
    log_epoch text NOT NULL,
    epoch_required boolean NOT NULL,
    max_commit_seq bigint NOT NULL,
    horizon_seq bigint NOT NULL,
    created_at_ms bigint NOT NULL,
    owner text NOT NULL,
    owner_generation bigint NOT NULL
);

CREATE TABLE v2fixture_src.sync_snapshot__todos (
    partition_id text NOT NULL COLLATE pg_catalog."C",
    id text NOT NULL COLLATE pg_catalog."C",
    list_id text NOT NULL,
    title text NOT NULL,
    done boolean NOT NULL,
    "position" bigint NOT NULL,
    updated_at_ms bigint NOT NULL,
    _sync_version bigint NOT NULL
);

CREATE TABLE v2fixture_src.sync_snapshot_marks (
    partition text NOT NULL COLLATE pg_catalog."C"
);

CREATE TABLE v2fixture_src.sync_writer_fence (
    partition text NOT NULL COLLATE pg_catalog."C",
    required_writer_version integer NOT NULL
);

CREATE TABLE v2fixture_src.synclane_segments (
    partition text NOT NULL,
    build_key text NOT NULL,
    id text NOT NULL,
    media_type smallint NOT NULL,
    tbl text NOT NULL,
    scope_digest text NOT NULL,
    as_of bigint NOT NULL,
    byte_length bigint NOT NULL,
    row_count bigint NOT NULL,
    row_cursor text,
    next_row_cursor text,
    created_at_ms bigint NOT NULL,
    expires_at_ms bigint NOT NULL,
    data bytea
);

CREATE TABLE v2fixture_src.todos (
    partition_id text NOT NULL COLLATE pg_catalog."C",
    id text NOT NULL COLLATE pg_catalog."C",
    list_id text NOT NULL,
    title text NOT NULL,
    done boolean NOT NULL,
    "position" bigint NOT NULL,
    updated_at_ms bigint NOT NULL,
    _sync_version bigint NOT NULL
);

INSERT INTO v2fixture_src.sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('default', 'todos', 'list_id', 'L1', 1, 0);
INSERT INTO v2fixture_src.sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('default', 'todos', 'list_id', 'L1', 1, 1);
INSERT INTO v2fixture_src.sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('default', 'todos', 'list_id', 'L1', 1, 2);
INSERT INTO v2fixture_src.sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('default', 'todos', 'list_id', 'L1', 2, 0);
INSERT INTO v2fixture_src.sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('default', 'todos', 'list_id', 'L1', 3, 0);
INSERT INTO v2fixture_src.sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('default', 'todos', 'list_id', 'L1', 3, 1);
INSERT INTO v2fixture_src.sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('default', 'todos', 'list_id', 'L1', 4, 0);
INSERT INTO v2fixture_src.sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('default', 'todos', 'list_id', 'L1', 5, 0);
INSERT INTO v2fixture_src.sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('acme', 'todos', 'list_id', 'L1', 1, 0);
INSERT INTO v2fixture_src.sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('acme', 'todos', 'list_id', 'L1', 1, 1);
INSERT INTO v2fixture_src.sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('acme', 'todos', 'list_id', 'L1', 1, 2);
INSERT INTO v2fixture_src.sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('acme', 'todos', 'list_id', 'L1', 2, 0);
INSERT INTO v2fixture_src.sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('acme', 'todos', 'list_id', 'L1', 3, 0);
INSERT INTO v2fixture_src.sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('acme', 'todos', 'list_id', 'L1', 3, 1);
INSERT INTO v2fixture_src.sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('acme', 'todos', 'list_id', 'L1', 4, 0);
INSERT INTO v2fixture_src.sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('acme', 'todos', 'list_id', 'L1', 5, 0);

INSERT INTO v2fixture_src.sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('default', 1, 0, 'todos', 't1', 1, 1, '{"list_id":"L1"}', '\x00020000007431020000004c310500000074312076310001000000000000000168e5cf8b010000');
INSERT INTO v2fixture_src.sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('default', 1, 1, 'todos', 't2', 1, 1, '{"list_id":"L1"}', '\x00020000007432020000004c310500000074322076310002000000000000000268e5cf8b010000');
INSERT INTO v2fixture_src.sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('default', 1, 2, 'todos', 't3', 1, 1, '{"list_id":"L1"}', '\x00020000007433020000004c310500000074332076310003000000000000000368e5cf8b010000');
INSERT INTO v2fixture_src.sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('default', 2, 0, 'todos', 't1', 1, 2, '{"list_id":"L1"}', '\x00020000007431020000004c310500000074312076320001000000000000000168e5cf8b010000');
INSERT INTO v2fixture_src.sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('default', 3, 0, 'todos', 't1', 1, 3, '{"list_id":"L1"}', '\x00020000007431020000004c310500000074312076330001000000000000000168e5cf8b010000');
INSERT INTO v2fixture_src.sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('default', 3, 1, 'todos', 't4', 1, 1, '{"list_id":"L1"}', '\x00020000007434020000004c310500000074342076310004000000000000000468e5cf8b010000');
INSERT INTO v2fixture_src.sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('default', 4, 0, 'todos', 't3', 2, 0, '{"list_id":"L1"}', NULL);
INSERT INTO v2fixture_src.sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('default', 5, 0, 'todos', 't4', 1, 2, '{"list_id":"L1"}', '\x00020000007434020000004c310500000074342076320004000000000000000468e5cf8b010000');
INSERT INTO v2fixture_src.sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('acme', 1, 0, 'todos', 't1', 1, 1, '{"list_id":"L1"}', '\x00020000007431020000004c310500000074312076310001000000000000000168e5cf8b010000');
INSERT INTO v2fixture_src.sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('acme', 1, 1, 'todos', 't2', 1, 1, '{"list_id":"L1"}', '\x00020000007432020000004c310500000074322076310002000000000000000268e5cf8b010000');
INSERT INTO v2fixture_src.sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('acme', 1, 2, 'todos', 't3', 1, 1, '{"list_id":"L1"}', '\x00020000007433020000004c310500000074332076310003000000000000000368e5cf8b010000');
INSERT INTO v2fixture_src.sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('acme', 2, 0, 'todos', 't1', 1, 2, '{"list_id":"L1"}', '\x00020000007431020000004c310500000074312076320001000000000000000168e5cf8b010000');
INSERT INTO v2fixture_src.sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('acme', 3, 0, 'todos', 't1', 1, 3, '{"list_id":"L1"}', '\x00020000007431020000004c310500000074312076330001000000000000000168e5cf8b010000');
INSERT INTO v2fixture_src.sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('acme', 3, 1, 'todos', 't4', 1, 1, '{"list_id":"L1"}', '\x00020000007434020000004c310500000074342076310004000000000000000468e5cf8b010000');
INSERT INTO v2fixture_src.sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('acme', 4, 0, 'todos', 't3', 2, 0, '{"list_id":"L1"}', NULL);
INSERT INTO v2fixture_src.sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('acme', 5, 0, 'todos', 't4', 1, 2, '{"list_id":"L1"}', '\x00020000007434020000004c310500000074342076320004000000000000000468e5cf8b010000');

INSERT INTO v2fixture_src.sync_clients (partition, client_id, actor_id, subscriptions, cursor, wire_version, updated_at_ms) VALUES ('default', 'writer-default', 'ada', NULL, -1, 2, 1796661222936);
INSERT INTO v2fixture_src.sync_clients (partition, client_id, actor_id, subscriptions, cursor, wire_version, updated_at_ms) VALUES ('acme', 'writer-acme', 'ada', NULL, -1, 2, 1796661222951);

INSERT INTO v2fixture_src.sync_commits (partition, seq, created_at_ms, actor_id, client_id, client_commit_id, writer_version) VALUES ('default', 1, 1796661222920, 'ada', 'writer-default', 'c1', 1);
INSERT INTO v2fixture_src.sync_commits (partition, seq, created_at_ms, actor_id, client_id, client_commit_id, writer_version) VALUES ('default', 2, 1796661222925, 'ada', 'writer-default', 'c2', 1);
INSERT INTO v2fixture_src.sync_commits (partition, seq, created_at_ms, actor_id, client_id, client_commit_id, writer_version) VALUES ('default', 3, 1796661222929, 'ada', 'writer-default', 'c3', 1);
INSERT INTO v2fixture_src.sync_commits (partition, seq, created_at_ms, actor_id, client_id, client_commit_id, writer_version) VALUES ('default', 4, 1796661222931, 'ada', 'writer-default', 'c4', 1);
INSERT INTO v2fixture_src.sync_commits (partition, seq, created_at_ms, actor_id, client_id, client_commit_id, writer_version) VALUES ('default', 5, 1796661222934, 'ada', 'writer-default', 'c5', 1);
INSERT INTO v2fixture_src.sync_commits (partition, seq, created_at_ms, actor_id, client_id, client_commit_id, writer_version) VALUES ('acme', 1, 1796661222941, 'ada', 'writer-acme', 'c1', 1);
INSERT INTO v2fixture_src.sync_commits (partition, seq, created_at_ms, actor_id, client_id, client_commit_id, writer_version) VALUES ('acme', 2, 1796661222943, 'ada', 'writer-acme', 'c2', 1);
INSERT INTO v2fixture_src.sync_commits (partition, seq, created_at_ms, actor_id, client_id, client_commit_id, writer_version) VALUES ('acme', 3, 1796661222946, 'ada', 'writer-acme', 'c3', 1);
INSERT INTO v2fixture_src.sync_commits (partition, seq, created_at_ms, actor_id, client_id, client_commit_id, writer_version) VALUES ('acme', 4, 1796661222948, 'ada', 'writer-acme', 'c4', 1);
INSERT INTO v2fixture_src.sync_commits (partition, seq, created_at_ms, actor_id, client_id, client_commit_id, writer_version) VALUES ('acme', 5, 1796661222950, 'ada', 'writer-acme', 'c5', 1);

INSERT INTO v2fixture_src.sync_idempotency (partition, client_id, client_commit_id, status, commit_seq, result, log_seq) VALUES ('default', 'writer-default', 'c1', 1, 1, '\x7b226e223a337d', 1);
INSERT INTO v2fixture_src.sync_idempotency (partition, client_id, client_commit_id, status, commit_seq, result, log_seq) VALUES ('default', 'writer-default', 'c2', 1, 2, '\x7b226e223a317d', 2);
INSERT INTO v2fixture_src.sync_idempotency (partition, client_id, client_commit_id, status, commit_seq, result, log_seq) VALUES ('default', 'writer-default', 'c3', 1, 3, '\x7b226e223a327d', 3);
INSERT INTO v2fixture_src.sync_idempotency (partition, client_id, client_commit_id, status, commit_seq, result, log_seq) VALUES ('default', 'writer-default', 'c4', 1, 4, '\x7b226e223a317d', 4);
INSERT INTO v2fixture_src.sync_idempotency (partition, client_id, client_commit_id, status, commit_seq, result, log_seq) VALUES ('default', 'writer-default', 'c5', 1, 5, '\x7b226e223a317d', 5);
INSERT INTO v2fixture_src.sync_idempotency (partition, client_id, client_commit_id, status, commit_seq, result, log_seq) VALUES ('acme', 'writer-acme', 'c1', 1, 1, '\x7b226e223a337d', 1);
INSERT INTO v2fixture_src.sync_idempotency (partition, client_id, client_commit_id, status, commit_seq, result, log_seq) VALUES ('acme', 'writer-acme', 'c2', 1, 2, '\x7b226e223a317d', 2);
INSERT INTO v2fixture_src.sync_idempotency (partition, client_id, client_commit_id, status, commit_seq, result, log_seq) VALUES ('acme', 'writer-acme', 'c3', 1, 3, '\x7b226e223a327d', 3);
INSERT INTO v2fixture_src.sync_idempotency (partition, client_id, client_commit_id, status, commit_seq, result, log_seq) VALUES ('acme', 'writer-acme', 'c4', 1, 4, '\x7b226e223a317d', 4);
INSERT INTO v2fixture_src.sync_idempotency (partition, client_id, client_commit_id, status, commit_seq, result, log_seq) VALUES ('acme', 'writer-acme', 'c5', 1, 5, '\x7b226e223a317d', 5);

INSERT INTO v2fixture_src.sync_partitions (partition, log_epoch, epoch_required, max_commit_seq, horizon_seq, created_at_ms, owner, owner_generation) VALUES ('default', 'e85a1aa32fff476eb1155b97b56a914f', false, 5, 0, 1796661222907, '', 0);
INSERT INTO v2fixture_src.sync_partitions (partition, log_epoch, epoch_required, max_commit_seq, horizon_seq, created_at_ms, owner, owner_generation) VALUES ('acme', '98221a2b8c634e4dbaf0e5bd69e09063', false, 5, 0, 1796661222937, '', 0);

INSERT INTO v2fixture_src.sync_schema_meta (id, schema_version, storage_version, schema_fingerprint) VALUES (1, 1, 1, 'sha256:ee838cafbaa82629f9e4ba925ba46773eeb9a01a01659571e6d331fb20023870');

INSERT INTO v2fixture_src.sync_snapshot__sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('default', 'todos', 'list_id', 'L1', 1, 0);
INSERT INTO v2fixture_src.sync_snapshot__sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('default', 'todos', 'list_id', 'L1', 1, 1);
INSERT INTO v2fixture_src.sync_snapshot__sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('default', 'todos', 'list_id', 'L1', 1, 2);
INSERT INTO v2fixture_src.sync_snapshot__sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('default', 'todos', 'list_id', 'L1', 2, 0);
INSERT INTO v2fixture_src.sync_snapshot__sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('default', 'todos', 'list_id', 'L1', 3, 0);
INSERT INTO v2fixture_src.sync_snapshot__sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('default', 'todos', 'list_id', 'L1', 3, 1);
INSERT INTO v2fixture_src.sync_snapshot__sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('default', 'todos', 'list_id', 'L1', 4, 0);
INSERT INTO v2fixture_src.sync_snapshot__sync_change_scopes (partition, table_name, var, value, seq, idx) VALUES ('default', 'todos', 'list_id', 'L1', 5, 0);

INSERT INTO v2fixture_src.sync_snapshot__sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('default', 1, 0, 'todos', 't1', 1, 1, '{"list_id":"L1"}', '\x00020000007431020000004c310500000074312076310001000000000000000168e5cf8b010000');
INSERT INTO v2fixture_src.sync_snapshot__sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('default', 1, 1, 'todos', 't2', 1, 1, '{"list_id":"L1"}', '\x00020000007432020000004c310500000074322076310002000000000000000268e5cf8b010000');
INSERT INTO v2fixture_src.sync_snapshot__sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('default', 1, 2, 'todos', 't3', 1, 1, '{"list_id":"L1"}', '\x00020000007433020000004c310500000074332076310003000000000000000368e5cf8b010000');
INSERT INTO v2fixture_src.sync_snapshot__sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('default', 2, 0, 'todos', 't1', 1, 2, '{"list_id":"L1"}', '\x00020000007431020000004c310500000074312076320001000000000000000168e5cf8b010000');
INSERT INTO v2fixture_src.sync_snapshot__sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('default', 3, 0, 'todos', 't1', 1, 3, '{"list_id":"L1"}', '\x00020000007431020000004c310500000074312076330001000000000000000168e5cf8b010000');
INSERT INTO v2fixture_src.sync_snapshot__sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('default', 3, 1, 'todos', 't4', 1, 1, '{"list_id":"L1"}', '\x00020000007434020000004c310500000074342076310004000000000000000468e5cf8b010000');
INSERT INTO v2fixture_src.sync_snapshot__sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('default', 4, 0, 'todos', 't3', 2, 0, '{"list_id":"L1"}', NULL);
INSERT INTO v2fixture_src.sync_snapshot__sync_changes (partition, seq, idx, table_name, row_id, op, row_version, scopes, row_data) VALUES ('default', 5, 0, 'todos', 't4', 1, 2, '{"list_id":"L1"}', '\x00020000007434020000004c310500000074342076320004000000000000000468e5cf8b010000');

INSERT INTO v2fixture_src.sync_snapshot__sync_commits (partition, seq, created_at_ms, actor_id, client_id, client_commit_id, writer_version) VALUES ('default', 1, 1796661222920, 'ada', 'writer-default', 'c1', 1);
INSERT INTO v2fixture_src.sync_snapshot__sync_commits (partition, seq, created_at_ms, actor_id, client_id, client_commit_id, writer_version) VALUES ('default', 2, 1796661222925, 'ada', 'writer-default', 'c2', 1);
INSERT INTO v2fixture_src.sync_snapshot__sync_commits (partition, seq, created_at_ms, actor_id, client_id, client_commit_id, writer_version) VALUES ('default', 3, 1796661222929, 'ada', 'writer-default', 'c3', 1);
INSERT INTO v2fixture_src.sync_snapshot__sync_commits (partition, seq, created_at_ms, actor_id, client_id, client_commit_id, writer_version) VALUES ('default', 4, 1796661222931, 'ada', 'writer-default', 'c4', 1);
INSERT INTO v2fixture_src.sync_snapshot__sync_commits (partition, seq, created_at_ms, actor_id, client_id, client_commit_id, writer_version) VALUES ('default', 5, 1796661222934, 'ada', 'writer-default', 'c5', 1);

INSERT INTO v2fixture_src.sync_snapshot__sync_idempotency (partition, client_id, client_commit_id, status, commit_seq, result, log_seq) VALUES ('default', 'writer-default', 'c1', 1, 1, '\x7b226e223a337d', 1);
INSERT INTO v2fixture_src.sync_snapshot__sync_idempotency (partition, client_id, client_commit_id, status, commit_seq, result, log_seq) VALUES ('default', 'writer-default', 'c2', 1, 2, '\x7b226e223a317d', 2);
INSERT INTO v2fixture_src.sync_snapshot__sync_idempotency (partition, client_id, client_commit_id, status, commit_seq, result, log_seq) VALUES ('default', 'writer-default', 'c3', 1, 3, '\x7b226e223a327d', 3);
INSERT INTO v2fixture_src.sync_snapshot__sync_idempotency (partition, client_id, client_commit_id, status, commit_seq, result, log_seq) VALUES ('default', 'writer-default', 'c4', 1, 4, '\x7b226e223a317d', 4);
INSERT INTO v2fixture_src.sync_snapshot__sync_idempotency (partition, client_id, client_commit_id, status, commit_seq, result, log_seq) VALUES ('default', 'writer-default', 'c5', 1, 5, '\x7b226e223a317d', 5);

INSERT INTO v2fixture_src.sync_snapshot__sync_partitions (partition, log_epoch, epoch_required, max_commit_seq, horizon_seq, created_at_ms, owner, owner_generation) VALUES ('default', 'e85a1aa32fff476eb1155b97b56a914f', false, 5, 0, 1796661222907, '', 0);

INSERT INTO v2fixture_src.sync_snapshot__todos (partition_id, id, list_id, title, done, "position", updated_at_ms, _sync_version) VALUES ('default', 't1', 'L1', 't1 v3', false, 1, 1700000000001, 3);
INSERT INTO v2fixture_src.sync_snapshot__todos (partition_id, id, list_id, title, done, "position", updated_at_ms, _sync_version) VALUES ('default', 't2', 'L1', 't2 v1', false, 2, 1700000000002, 1);
INSERT INTO v2fixture_src.sync_snapshot__todos (partition_id, id, list_id, title, done, "position", updated_at_ms, _sync_version) VALUES ('default', 't4', 'L1', 't4 v2', false, 4, 1700000000004, 2);

INSERT INTO v2fixture_src.sync_snapshot_marks (partition) VALUES ('default');

INSERT INTO v2fixture_src.todos (partition_id, id, list_id, title, done, "position", updated_at_ms, _sync_version) VALUES ('default', 't2', 'L1', 't2 v1', false, 2, 1700000000002, 1);
INSERT INTO v2fixture_src.todos (partition_id, id, list_id, title, done, "position", updated_at_ms, _sync_version) VALUES ('default', 't1', 'L1', 't1 v3', false, 1, 1700000000001, 3);
INSERT INTO v2fixture_src.todos (partition_id, id, list_id, title, done, "position", updated_at_ms, _sync_version) VALUES ('default', 't4', 'L1', 't4 v2', false, 4, 1700000000004, 2);
INSERT INTO v2fixture_src.todos (partition_id, id, list_id, title, done, "position", updated_at_ms, _sync_version) VALUES ('acme', 't2', 'L1', 't2 v1', false, 2, 1700000000002, 1);
INSERT INTO v2fixture_src.todos (partition_id, id, list_id, title, done, "position", updated_at_ms, _sync_version) VALUES ('acme', 't1', 'L1', 't1 v3', false, 1, 1700000000001, 3);
INSERT INTO v2fixture_src.todos (partition_id, id, list_id, title, done, "position", updated_at_ms, _sync_version) VALUES ('acme', 't4', 'L1', 't4 v2', false, 4, 1700000000004, 2);

SELECT pg_catalog.setval('v2fixture_src.sync_reactions_id_seq', 1, false);

ALTER TABLE ONLY v2fixture_src.sync_backfill_checkpoints
    ADD CONSTRAINT sync_backfill_checkpoints_pkey PRIMARY KEY (partition, name);

ALTER TABLE ONLY v2fixture_src.sync_blob_chunks
    ADD CONSTRAINT sync_blob_chunks_pkey PRIMARY KEY (blob_id, idx);

ALTER TABLE ONLY v2fixture_src.sync_blob_objects
    ADD CONSTRAINT sync_blob_objects_pkey PRIMARY KEY (blob_id);

ALTER TABLE ONLY v2fixture_src.sync_blob_refs
    ADD CONSTRAINT sync_blob_refs_pkey PRIMARY KEY (partition, table_name, row_id, blob_id);

ALTER TABLE ONLY v2fixture_src.sync_blobs
    ADD CONSTRAINT sync_blobs_pkey PRIMARY KEY (blob_id);

ALTER TABLE ONLY v2fixture_src.sync_change_scopes
    ADD CONSTRAINT sync_change_scopes_pkey PRIMARY KEY (partition, table_name, var, value, seq, idx);

ALTER TABLE ONLY v2fixture_src.sync_changes
    ADD CONSTRAINT sync_changes_pkey PRIMARY KEY (partition, seq, idx);

ALTER TABLE ONLY v2fixture_src.sync_clients
    ADD CONSTRAINT sync_clients_pkey PRIMARY KEY (partition, client_id);

ALTER TABLE ONLY v2fixture_src.sync_commits
    ADD CONSTRAINT sync_commits_pkey PRIMARY KEY (partition, seq);

ALTER TABLE ONLY v2fixture_src.sync_idempotency
    ADD CONSTRAINT sync_idempotency_pkey PRIMARY KEY (partition, client_id, client_commit_id);

ALTER TABLE ONLY v2fixture_src.sync_leases
    ADD CONSTRAINT sync_leases_pkey PRIMARY KEY (partition, client_id);

ALTER TABLE ONLY v2fixture_src.sync_partitions
    ADD CONSTRAINT sync_partitions_pkey PRIMARY KEY (partition);

ALTER TABLE ONLY v2fixture_src.sync_reactions
    ADD CONSTRAINT sync_reactions_pkey PRIMARY KEY (id);

ALTER TABLE ONLY v2fixture_src.sync_schema_meta
    ADD CONSTRAINT sync_schema_meta_pkey PRIMARY KEY (id);

ALTER TABLE ONLY v2fixture_src.sync_snapshot_marks
    ADD CONSTRAINT sync_snapshot_marks_pkey PRIMARY KEY (partition);

ALTER TABLE ONLY v2fixture_src.sync_writer_fence
    ADD CONSTRAINT sync_writer_fence_pkey PRIMARY KEY (partition);

ALTER TABLE ONLY v2fixture_src.synclane_segments
    ADD CONSTRAINT synclane_segments_pkey PRIMARY KEY (partition, build_key);

ALTER TABLE ONLY v2fixture_src.todos
    ADD CONSTRAINT todos_pkey PRIMARY KEY (partition_id, id);

CREATE INDEX "5_todos_s_list_id" ON v2fixture_src.todos USING btree (partition_id, list_id, id);

CREATE INDEX sync_blob_refs_by_blob ON v2fixture_src.sync_blob_refs USING btree (blob_id, partition);

CREATE INDEX sync_changes_by_table ON v2fixture_src.sync_changes USING btree (partition, table_name, seq, idx);

CREATE INDEX sync_idempotency_rejected ON v2fixture_src.sync_idempotency USING btree (partition, log_seq) WHERE (status = 3);

CREATE INDEX sync_leases_by_id ON v2fixture_src.sync_leases USING btree (partition, lease_id);

CREATE INDEX sync_reactions_due ON v2fixture_src.sync_reactions USING btree (state, next_attempt_at_ms, id);

CREATE INDEX synclane_segments_by_expiry ON v2fixture_src.synclane_segments USING btree (expires_at_ms);

CREATE INDEX synclane_segments_by_id ON v2fixture_src.synclane_segments USING btree (id, partition);

CREATE TRIGGER sync_commits_writer_fence BEFORE INSERT ON v2fixture_src.sync_commits FOR EACH ROW EXECUTE FUNCTION v2fixture_src.sync_writer_fence_check();
