#!/usr/bin/env node
// Interop scenario against `synclane serve` (demo schema, development auth)
// started with a wire-version window that holds version 2:
//
//   synclane serve --wire-versions 2,3 ...
//   node interop.mjs http://127.0.0.1:8787
//
// Two clients (actors A and B, distinct clientIds, separate local databases)
// subscribe to todos for one list; A inserts 3 todos and updates one, B
// inserts 1 and deletes one of A's; both sync until quiescent and the two
// local databases must be identical, including per-row server versions.
// It also checks that every request is wire version 2 from the very first
// one, that the first round acquired the log epoch (no logEpoch sent, one
// received, no pushes carried) and that later rounds present it, and the
// schema-floor rule (a request for an unserved schemaVersion gets a
// header-only response carrying requiredSchemaVersion). Exits non-zero with a
// message on any mismatch.
//
// With --expect-refused it checks the opposite: a server with the default
// window (version 3 alone, as @syncular/server 0.23) refuses this client's
// very first request with HTTP 400 sync.invalid_request naming wire version
// 2, and refuses it the same way when the frames after the envelope header
// are garbage: the version is refused before any frame is read.
//
//   synclane serve ...
//   node interop.mjs http://127.0.0.1:8787 --expect-refused
//
// The client is the dependency-free SSP2 implementation in ssp2.mjs: the
// reference @syncular/client is not published on the npm registry (README.md).

import { mkdtempSync, writeFileSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import {
  CONTENT_TYPE, WIRE_VERSION, F, encodeRequest, decodeResponse, decodeSegment, makeRowCodec, hex,
} from './ssp2.mjs';

const SCHEMA_VERSION = 1;
const TABLE = 'todos';
const codec = makeRowCodec([
  { name: 'id', type: 'string', nullable: false },
  { name: 'list_id', type: 'string', nullable: false },
  { name: 'title', type: 'string', nullable: false },
  { name: 'done', type: 'boolean', nullable: false },
  { name: 'position', type: 'integer', nullable: false },
  { name: 'updated_at_ms', type: 'integer', nullable: false },
]);

class Failure extends Error {}
const fail = (msg) => { throw new Failure(msg); };

// ------------------------------------------------------------ transport

// Every exchange is recorded (request and response bytes) so a failure can
// print the exact bytes.
function makeTransport(baseUrl, actor, partition, log) {
  const url = baseUrl.replace(/\/+$/, '') + (baseUrl.replace(/\/+$/, '').endsWith('/sync') ? '' : '/sync');
  return async function send(body) {
    const entry = { actor, request: body };
    log.push(entry);
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': CONTENT_TYPE, 'accept-encoding': 'gzip', 'x-actor': actor, 'x-partition': partition },
      body,
    });
    const bytes = new Uint8Array(await res.arrayBuffer());
    Object.assign(entry, { status: res.status, contentType: res.headers.get('content-type'), response: bytes });
    if (res.status !== 200) {
      fail(`HTTP ${res.status} from ${url} for actor ${actor}: ${Buffer.from(bytes).toString('utf8')}\nrequest hex: ${hex(body)}`);
    }
    if (!(res.headers.get('content-type') ?? '').startsWith(CONTENT_TYPE)) {
      fail(`response content-type ${res.headers.get('content-type')}, want ${CONTENT_TYPE}`);
    }
    try {
      entry.decoded = decodeResponse(bytes);
    } catch (e) {
      fail(`undecodable response: ${e.message}\nrequest hex: ${hex(body)}\nresponse hex: ${hex(bytes)}`);
    }
    return entry.decoded;
  };
}

// ------------------------------------------------------------ client

// The local database is a JSON file per client: rows by id with their last
// known server version, the outbox, the subscription cursor/resume token and
// the log epoch.
class Client {
  constructor({ name, actor, baseUrl, partition, dir, log }) {
    Object.assign(this, { name, actor });
    this.file = join(dir, `${name}.json`);
    this.clientId = `${name}-${randomUUID()}`;
    this.send = makeTransport(baseUrl, actor, partition, log);
    this.db = { rows: {}, outbox: [], subs: {}, logEpoch: null };
    this.epochAcquired = false;
    this.stats = { rounds: 0, commitsApplied: 0, segmentRows: 0, pushed: 0 };
    this.save();
  }

  save() { writeFileSync(this.file, JSON.stringify(this.db, null, 1)); }
  load() { this.db = JSON.parse(readFileSync(this.file, 'utf8')); }

  subscribe(id, table, scopes) {
    this.db.subs[id] ??= { id, table, scopes, cursor: -1, bootstrapState: null, status: null };
    this.save();
  }

  // Local mutations: applied optimistically and queued in the outbox as one
  // commit. Upserts carry baseVersion = last known server version (0 for an
  // insert); deletes carry none.
  mutate(ops) {
    const operations = [];
    for (const m of ops) {
      const cur = this.db.rows[m.id];
      if (m.op === 'delete') {
        delete this.db.rows[m.id];
        operations.push({ table: TABLE, rowId: m.id, op: 'delete' });
      } else {
        const row = { ...(cur?.row ?? {}), ...m.values, id: m.id };
        this.db.rows[m.id] = { row, version: cur?.version ?? 0 };
        operations.push({ table: TABLE, rowId: m.id, op: 'upsert', baseVersion: cur?.version ?? 0, row });
      }
    }
    this.db.outbox.push({ clientCommitId: randomUUID(), operations });
    this.save();
  }

  // One sync round: push the outbox (only once an epoch is held) and pull
  // every subscription. Returns whether anything changed.
  async round() {
    this.load();
    this.stats.rounds++;
    const epoch = this.db.logEpoch;
    const commits = epoch == null ? [] : this.db.outbox.map((c) => ({
      clientCommitId: c.clientCommitId,
      operations: c.operations.map((o) => ({ ...o, payload: o.row ? codec.encode(o.row) : undefined, row: undefined })),
    }));
    const subs = Object.values(this.db.subs);
    const req = encodeRequest({
      clientId: this.clientId, schemaVersion: SCHEMA_VERSION, logEpoch: epoch, commits,
      pull: { accept: 0b0011 }, subscriptions: subs,
    });
    const res = await this.send(req);
    let progressed = false;
    const frames = res.frames;
    if (res.wireVersion !== WIRE_VERSION) fail(`${this.name}: response wireVersion ${res.wireVersion}, want ${WIRE_VERSION}`);
    const hdr = frames[0];
    if (hdr.requiredSchemaVersion != null) fail(`${this.name}: server requires schema ${hdr.requiredSchemaVersion} (sent ${SCHEMA_VERSION})`);
    if (hdr.resetRequired) {
      // Epoch handshake: a request without a logEpoch (or with a stale one)
      // is answered RESP_HEADER{logEpoch, resetRequired} + END only. The
      // client adopts the epoch and restarts every subscription from a fresh
      // bootstrap; the outbox survives and is pushed under the new epoch.
      if (epoch != null) fail(`${this.name}: unexpected epoch reset ${epoch} -> ${hdr.logEpoch}`);
      if (frames.length !== 1) fail(`${this.name}: resetRequired response carries ${frames.length - 1} frames after RESP_HEADER`);
      this.db.logEpoch = hdr.logEpoch;
      for (const s of subs) Object.assign(s, { cursor: -1, bootstrapState: null });
      this.epochAcquired = true;
      this.save();
      return true;
    }
    if (epoch == null) {
      fail(`${this.name}: epoch-less request was served without an epoch handshake (logEpoch ${hdr.logEpoch})`);
    } else if (hdr.logEpoch !== epoch) {
      fail(`${this.name}: server epoch changed ${epoch} -> ${hdr.logEpoch} without resetRequired`);
    }

    let i = 1;
    // Push results, one per commit in request order.
    for (const c of commits) {
      while (frames[i]?.type === F.LEASE) i++;
      const pr = frames[i++];
      if (pr?.type !== F.PUSH_RESULT) fail(`${this.name}: expected PUSH_RESULT for ${c.clientCommitId}, got frame ${JSON.stringify(pr?.type)}`);
      if (pr.clientCommitId !== c.clientCommitId) fail(`${this.name}: PUSH_RESULT for ${pr.clientCommitId}, want ${c.clientCommitId}`);
      if (pr.status === 'rejected') fail(`${this.name}: commit ${c.clientCommitId} rejected: ${JSON.stringify(pr.results, (k, v) => (v instanceof Uint8Array ? hex(v) : v))}`);
      if (pr.results.length !== c.operations.length) fail(`${this.name}: ${pr.results.length} results for ${c.operations.length} operations`);
      if (frames[i]?.type === F.PUSH_RESULT_DETAILS) i++;
      this.db.outbox = this.db.outbox.filter((o) => o.clientCommitId !== c.clientCommitId);
      this.stats.pushed++;
      progressed = true;
    }

    // Subscriptions, in request order.
    for (const s of subs) {
      const st = frames[i++];
      if (st?.type === F.ERROR) fail(`${this.name}: in-band ERROR ${st.code}: ${st.message}`);
      if (st?.type !== F.SUB_START || st.id !== s.id) fail(`${this.name}: expected SUB_START ${s.id}, got ${JSON.stringify(st)}`);
      if (st.status !== 'active') fail(`${this.name}: subscription ${s.id} is ${st.status} (${st.reasonCode})`);
      const fresh = s.cursor < 0 && s.bootstrapState == null;
      let firstSegment = true;
      for (;;) {
        const f = frames[i++];
        if (!f) fail(`${this.name}: response ended inside subscription ${s.id}`);
        if (f.type === F.ERROR) fail(`${this.name}: in-band ERROR ${f.code}: ${f.message}`);
        if (f.type === F.SUB_END) {
          if (f.nextCursor !== s.cursor || f.bootstrapState !== s.bootstrapState) progressed = true;
          s.cursor = f.nextCursor;
          s.bootstrapState = f.bootstrapState;
          break;
        }
        if (f.type === F.COMMIT) {
          for (const ch of f.changes) {
            if (ch.table !== TABLE) fail(`${this.name}: change for unknown table ${ch.table}`);
            if (ch.op === 'delete') delete this.db.rows[ch.rowId];
            else {
              const row = codec.decode(ch.row);
              if (row.id !== ch.rowId) fail(`${this.name}: change rowId ${ch.rowId} but row id ${row.id}`);
              this.db.rows[ch.rowId] = { row, version: ch.rowVersion };
            }
          }
          this.stats.commitsApplied++;
          progressed = true;
        } else if (f.type === F.SEGMENT_INLINE) {
          if (fresh && firstSegment) {
            // §5.6 first-page clear for the subscription's effective scopes.
            for (const [id, r] of Object.entries(this.db.rows)) {
              if ((st.effectiveScopes.list_id ?? []).includes(r.row.list_id)) delete this.db.rows[id];
            }
          }
          firstSegment = false;
          for (const block of decodeSegment(f.segment, TABLE, SCHEMA_VERSION, codec)) {
            for (const { serverVersion, row } of block) {
              this.db.rows[row.id] = { row, version: serverVersion };
              this.stats.segmentRows++;
            }
          }
          progressed = true;
        } else if (f.type === F.SEGMENT_REF) {
          fail(`${this.name}: SEGMENT_REF ${f.segmentId} (mediaType ${f.mediaType}); this client only handles inline segments`);
        } else {
          fail(`${this.name}: unexpected frame 0x${f.type.toString(16)} inside subscription ${s.id}`);
        }
      }
    }
    if (frames[i]?.type === F.ERROR) fail(`${this.name}: in-band ERROR ${frames[i].code}: ${frames[i].message}`);
    if (i !== frames.length) fail(`${this.name}: ${frames.length - i} unexpected trailing frames`);
    // Optimistic rows of commits still in the outbox stay as they are;
    // after quiescence the outbox is empty.
    this.save();
    return progressed || this.db.outbox.length > 0 || subs.some((s) => s.bootstrapState != null);
  }

  async syncUntilQuiescent(maxRounds = 20) {
    for (let n = 0; n < maxRounds; n++) if (!(await this.round())) return;
    fail(`${this.name}: not quiescent after ${maxRounds} rounds`);
  }

  snapshot() {
    this.load();
    return Object.fromEntries(Object.entries(this.db.rows).sort(([a], [b]) => (a < b ? -1 : 1)));
  }
}

// ------------------------------------------------------------ refusal

// expectRefused checks that a server reading wire version 3 alone refuses a
// version-2 request with a JSON 400 sync.invalid_request before reading any
// frame: the client's real first request and the same envelope header
// followed by garbage get the same refusal.
async function expectRefused(baseUrl) {
  const url = baseUrl.replace(/\/+$/, '') + '/sync';
  const first = encodeRequest({
    clientId: `R-${randomUUID()}`, schemaVersion: SCHEMA_VERSION, logEpoch: null,
    pull: { accept: 0b0011 }, subscriptions: [],
  });
  if (Buffer.from(first).readUInt16LE(4) !== WIRE_VERSION || WIRE_VERSION !== 2) fail(`the client does not write wire version 2`);
  const garbage = new Uint8Array(first.length);
  garbage.set(first.subarray(0, 8)); // magic, version 2, kind, flags
  garbage.fill(0xff, 8);
  for (const [what, body] of [['first request', first], ['header + garbage frames', garbage]]) {
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': CONTENT_TYPE, 'x-actor': 'actor-r', 'x-partition': 'interop-refused' },
      body,
    });
    const text = await res.text();
    let err;
    try { err = JSON.parse(text); } catch { fail(`${what}: HTTP ${res.status}, body is not the JSON error: ${text}`); }
    if (res.status !== 400 || err.code !== 'sync.invalid_request' || err.details?.wireVersion !== 2 || !/wireVersion 2/.test(err.message ?? '')) {
      fail(`${what}: HTTP ${res.status} ${text}, want 400 sync.invalid_request naming wireVersion 2`);
    }
    console.log(`  ${what}: HTTP 400 ${err.code}: ${err.message}`);
  }
  console.log(`refused OK: ${baseUrl} does not serve wire version 2`);
}

// ------------------------------------------------------------ scenario

async function main() {
  const args = process.argv.slice(2);
  const baseUrl = args.find((a) => !a.startsWith('--')) ?? process.env.SYNCLANE_URL ?? 'http://127.0.0.1:8787';
  if (args.includes('--expect-refused')) {
    try {
      await expectRefused(baseUrl);
    } catch (e) {
      console.error(`refusal check FAILED: ${e instanceof Failure ? e.message : e.stack}`);
      process.exitCode = 1;
    }
    return;
  }
  const partition = process.env.SYNCLANE_PARTITION ?? `interop-${randomUUID().slice(0, 8)}`;
  const list = `L1-${randomUUID().slice(0, 8)}`;
  const dir = mkdtempSync(join(tmpdir(), 'synclane-interop-'));
  const log = [];
  try {
    const A = new Client({ name: 'A', actor: 'actor-a', baseUrl, partition, dir, log });
    const B = new Client({ name: 'B', actor: 'actor-b', baseUrl, partition, dir, log });
    for (const c of [A, B]) c.subscribe(`todos:${list}`, TABLE, { list_id: [list] });

    // Epoch acquisition plus (empty) bootstrap.
    await A.syncUntilQuiescent();
    await B.syncUntilQuiescent();

    const now = Date.now();
    const todo = (id, title, position) => ({ id, values: { list_id: list, title, done: false, position, updated_at_ms: now } });
    A.mutate([{ op: 'upsert', ...todo('a1', 'buy milk', 1) }, { op: 'upsert', ...todo('a2', 'walk dog', 2) }]);
    A.mutate([{ op: 'upsert', ...todo('a3', 'write report', 3) }]);
    await A.syncUntilQuiescent();
    A.mutate([{ op: 'upsert', id: 'a1', values: { done: true, title: 'buy oat milk', updated_at_ms: now + 1 } }]);

    await B.syncUntilQuiescent(); // B sees a1..a3 before deleting one
    B.mutate([{ op: 'upsert', ...todo('b1', 'call mom', 4) }]);
    B.mutate([{ op: 'delete', id: 'a2' }]);

    for (let n = 0; n < 3; n++) {
      await A.syncUntilQuiescent();
      await B.syncUntilQuiescent();
    }

    // ---- checks
    const sa = A.snapshot();
    const sb = B.snapshot();
    if (JSON.stringify(sa) !== JSON.stringify(sb)) fail(`local databases differ:\nA: ${JSON.stringify(sa)}\nB: ${JSON.stringify(sb)}`);
    const ids = Object.keys(sa).join(',');
    if (ids !== 'a1,a3,b1') fail(`rows ${ids}, want a1,a3,b1`);
    const a1 = sa.a1;
    if (a1.row.title !== 'buy oat milk' || a1.row.done !== true || a1.version !== 2) fail(`a1 is ${JSON.stringify(a1)}, want updated title, done, version 2`);
    for (const id of ['a3', 'b1']) if (sa[id].version !== 1) fail(`${id} version ${sa[id].version}, want 1`);
    if (A.db.outbox.length || B.db.outbox.length) fail('outbox not drained');

    // A late joiner bootstraps the list from a rows segment and must hold
    // the same rows and versions.
    const C = new Client({ name: 'C', actor: 'actor-c', baseUrl, partition, dir, log });
    C.subscribe(`todos:${list}`, TABLE, { list_id: [list] });
    await C.syncUntilQuiescent();
    const sc = C.snapshot();
    if (JSON.stringify(sc) !== JSON.stringify(sa)) fail(`late joiner differs:\nA: ${JSON.stringify(sa)}\nC: ${JSON.stringify(sc)}`);
    if (C.stats.segmentRows !== 3) fail(`late joiner got ${C.stats.segmentRows} rows from segments, want 3`);

    // Wire version 2 from the first request on, and the epoch handshake.
    for (const [n, e] of log.entries()) {
      const v = Buffer.from(e.request).readUInt16LE(4);
      if (v !== 2) fail(`request #${n} (${e.actor}) has wireVersion ${v}`);
    }
    const first = (actor) => log.find((e) => e.actor === actor);
    for (const c of [A, B, C]) {
      const e = first(c.actor);
      const hdr = e.decoded.frames[0];
      if (!hdr.logEpoch || !hdr.resetRequired || e.decoded.frames.length !== 1) {
        fail(`${c.name}: first response is not the epoch handshake (header-only, logEpoch + resetRequired): ${JSON.stringify(e.decoded.frames)}`);
      }
      // REQ_HEADER payload starts at byte 13: str clientId, i32 schemaVersion, opt(str) logEpoch.
      const b = Buffer.from(e.request);
      const idLen = b.readUInt32LE(13);
      if (b[13 + 4 + idLen + 4] !== 0) fail(`${c.name}: first request already carried a logEpoch`);
      if (!c.epochAcquired) fail(`${c.name}: no epoch acquisition happened`);
      const later = log.filter((x) => x.actor === c.actor).slice(1);
      for (const x of later) {
        const lb = Buffer.from(x.request);
        if (lb[13 + 4 + lb.readUInt32LE(13) + 4] !== 1) fail(`${c.name}: a later request did not present the logEpoch`);
        if (x.decoded.frames[0].logEpoch !== hdr.logEpoch) fail(`${c.name}: epoch changed mid-run`);
      }
    }
    if (A.db.logEpoch !== B.db.logEpoch || C.db.logEpoch !== A.db.logEpoch) fail(`clients hold different epochs ${A.db.logEpoch} / ${B.db.logEpoch}`);

    // Schema floor: an unserved (future) schemaVersion gets a header-only
    // response with both requiredSchemaVersion and latestSchemaVersion.
    const floorLog = [];
    const sendFloor = makeTransport(baseUrl, 'actor-a', partition, floorLog);
    const fr = await sendFloor(encodeRequest({
      clientId: A.clientId, schemaVersion: SCHEMA_VERSION + 1, logEpoch: A.db.logEpoch,
      pull: { accept: 0b0011 }, subscriptions: [{ id: 'x', table: TABLE, scopes: { list_id: [list] }, cursor: -1 }],
    }));
    const fh = fr.frames[0];
    if (fr.frames.length !== 1 || fh.requiredSchemaVersion !== SCHEMA_VERSION || fh.latestSchemaVersion !== SCHEMA_VERSION) {
      fail(`schema-floor response: ${JSON.stringify(fr.frames)}`);
    }

    console.log(`interop OK against ${baseUrl} (partition ${partition}, list ${list})`);
    console.log(`  requests: ${log.length}, all wireVersion 2; epoch ${A.db.logEpoch} acquired by every client on their first request`);
    console.log(`  A: ${JSON.stringify(A.stats)}  B: ${JSON.stringify(B.stats)}  C (late joiner): ${JSON.stringify(C.stats)}`);
    for (const [id, r] of Object.entries(sa)) console.log(`  ${id} v${r.version} ${JSON.stringify(r.row.title)} done=${r.row.done}`);
    console.log('  schema floor: schemaVersion 2 -> header-only response requiredSchemaVersion=1');
  } catch (e) {
    console.error(`interop FAILED: ${e instanceof Failure ? e.message : e.stack}`);
    const last = log.at(-1);
    if (last) {
      console.error(`last exchange (${last.actor}): HTTP ${last.status ?? '-'}`);
      console.error(`  request  ${hex(last.request)}`);
      if (last.response) console.error(`  response ${hex(last.response)}`);
    }
    process.exitCode = 1;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
// fetch keeps idle keep-alive sockets open for seconds; do not wait for them.
process.exit(process.exitCode ?? 0);
