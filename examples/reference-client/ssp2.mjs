// A minimal, dependency-free SSP2 client codec and sync loop for Node >= 18,
// written from the Syncular protocol specification (SPEC.md, SSP2 wire
// version 1, plus the wire-version-2 logEpoch fields of REQ_HEADER and
// RESP_HEADER). It is a stand-in for the reference `@syncular/client`, which
// is not published on the npm registry (see README.md): it speaks the same
// bytes so `synclane serve` can be exercised from a non-Go implementation.
//
// Only what the interop scenario needs is implemented: one table with a
// schema-declared positional row codec, subscriptions, push commits, COMMIT
// and inline rows-segment (SSG2) application. Anything else the server sends
// (SEGMENT_REF, sqlite segments, unknown frames after ERROR, ...) fails loud.

const te = new TextEncoder();
const td = new TextDecoder('utf-8', { fatal: true });

export const CONTENT_TYPE = 'application/vnd.syncular.sync.v2';
export const WIRE_VERSION = 2;

export const F = {
  END: 0x00, REQ_HEADER: 0x01, PUSH_COMMIT: 0x02, PULL_HEADER: 0x03, SUBSCRIPTION: 0x04,
  RESP_HEADER: 0x10, PUSH_RESULT: 0x11, SUB_START: 0x12, COMMIT: 0x13, SEGMENT_REF: 0x14,
  SEGMENT_INLINE: 0x15, SUB_END: 0x16, LEASE: 0x19, PUSH_RESULT_DETAILS: 0x1b, ERROR: 0x1f,
};
const REQUEST_ONLY = new Set([F.REQ_HEADER, F.PUSH_COMMIT, F.PULL_HEADER, F.SUBSCRIPTION]);
const TYPE_TAGS = { string: 1, integer: 2, float: 3, boolean: 4, json: 5, bytes: 6 };

// ---------------------------------------------------------------- writer

class W {
  constructor() { this.parts = []; this.len = 0; }
  raw(u8) { this.parts.push(u8); this.len += u8.length; return this; }
  u8(v) { return this.raw(Uint8Array.of(v)); }
  u16(v) { const b = new Uint8Array(2); new DataView(b.buffer).setUint16(0, v, true); return this.raw(b); }
  u32(v) { const b = new Uint8Array(4); new DataView(b.buffer).setUint32(0, v, true); return this.raw(b); }
  i32(v) { const b = new Uint8Array(4); new DataView(b.buffer).setInt32(0, v, true); return this.raw(b); }
  i64(v) {
    if (!Number.isSafeInteger(v)) throw new Error(`i64 ${v} is not a safe integer`);
    const b = new Uint8Array(8); new DataView(b.buffer).setBigInt64(0, BigInt(v), true); return this.raw(b);
  }
  f64(v) { const b = new Uint8Array(8); new DataView(b.buffer).setFloat64(0, v, true); return this.raw(b); }
  bool(v) { return this.u8(v ? 1 : 0); }
  bytes(u8) { return this.u32(u8.length).raw(u8); }
  str(s) { return this.bytes(te.encode(s)); }
  optStr(s) { return s == null ? this.u8(0) : this.u8(1).str(s); }
  optI64(v) { return v == null ? this.u8(0) : this.u8(1).i64(v); }
  optBytes(b) { return b == null ? this.u8(0) : this.u8(1).bytes(b); }
  // map str -> list(str), keys in UTF-16 code-unit order (JS default sort).
  scopeMap(m) {
    const keys = Object.keys(m).sort();
    this.u32(keys.length);
    for (const k of keys) {
      this.str(k);
      const vals = m[k];
      this.u32(vals.length);
      for (const v of vals) this.str(v);
    }
    return this;
  }
  done() {
    const out = new Uint8Array(this.len);
    let o = 0;
    for (const p of this.parts) { out.set(p, o); o += p.length; }
    return out;
  }
}

// ---------------------------------------------------------------- reader

class R {
  constructor(u8, base = 0) { this.b = u8; this.dv = new DataView(u8.buffer, u8.byteOffset, u8.byteLength); this.o = 0; this.base = base; }
  fail(msg) { throw new Error(`decode error at byte ${this.base + this.o}: ${msg}`); }
  need(n, what) { if (this.b.length - this.o < n) this.fail(`truncated ${what}`); }
  get left() { return this.b.length - this.o; }
  u8(what = 'u8') { this.need(1, what); return this.b[this.o++]; }
  u16(what = 'u16') { this.need(2, what); const v = this.dv.getUint16(this.o, true); this.o += 2; return v; }
  u32(what = 'u32') { this.need(4, what); const v = this.dv.getUint32(this.o, true); this.o += 4; return v; }
  i32(what = 'i32') { this.need(4, what); const v = this.dv.getInt32(this.o, true); this.o += 4; return v; }
  i64(what = 'i64') {
    this.need(8, what);
    const v = this.dv.getBigInt64(this.o, true); this.o += 8;
    if (v > BigInt(Number.MAX_SAFE_INTEGER) || v < -BigInt(Number.MAX_SAFE_INTEGER)) this.fail(`${what} outside ±(2^53-1)`);
    return Number(v);
  }
  f64(what = 'f64') { this.need(8, what); const v = this.dv.getFloat64(this.o, true); this.o += 8; return v; }
  bool(what = 'bool') { const v = this.u8(what); if (v > 1) this.fail(`${what}: bool byte ${v}`); return v === 1; }
  opt(what) { const v = this.u8(what); if (v > 1) this.fail(`${what}: presence byte ${v}`); return v === 1; }
  bytes(what = 'bytes') { const n = this.u32(what); this.need(n, what); const v = this.b.subarray(this.o, this.o + n); this.o += n; return v; }
  str(what = 'str') { return td.decode(this.bytes(what)); }
  json(what = 'json') { const s = this.str(what); JSON.parse(s); return s; }
  optI32(what) { return this.opt(what) ? this.i32(what) : null; }
  optI64(what) { return this.opt(what) ? this.i64(what) : null; }
  optStr(what) { return this.opt(what) ? this.str(what) : null; }
  optJson(what) { return this.opt(what) ? this.json(what) : null; }
  optBytes(what) { return this.opt(what) ? this.bytes(what) : null; }
  list(fn, what) { const n = this.u32(what); const out = []; for (let i = 0; i < n; i++) out.push(fn()); return out; }
  map(fn, what) {
    const n = this.u32(what); const out = {}; let prev = null;
    for (let i = 0; i < n; i++) {
      const k = this.str(`${what} key`);
      if (prev !== null && !(prev < k)) this.fail(`${what}: keys not strictly ascending (${prev}, ${k})`);
      prev = k; out[k] = fn();
    }
    return out;
  }
  end(what) { if (this.left !== 0) this.fail(`${this.left} trailing bytes in ${what}`); }
}

// ---------------------------------------------------------------- row codec (SPEC §2.4)

export function makeRowCodec(columns) {
  const nb = Math.ceil(columns.length / 8);
  return {
    columns,
    encode(row) {
      const w = new W();
      const bitmap = new Uint8Array(nb);
      columns.forEach((c, i) => {
        if (row[c.name] == null) {
          if (!c.nullable) throw new Error(`column ${c.name} is not nullable`);
          bitmap[i >> 3] |= 1 << (i & 7);
        }
      });
      w.raw(bitmap);
      columns.forEach((c) => {
        const v = row[c.name];
        if (v == null) return;
        switch (c.type) {
          case 'string': case 'json': w.str(v); break;
          case 'integer': w.i64(v); break;
          case 'float': w.f64(v); break;
          case 'boolean': w.bool(v); break;
          case 'bytes': w.bytes(v); break;
          default: throw new Error(`type ${c.type}`);
        }
      });
      return w.done();
    },
    decodeFrom(r) {
      const bitmap = []; for (let i = 0; i < nb; i++) bitmap.push(r.u8('null bitmap'));
      for (let i = columns.length; i < nb * 8; i++) if (bitmap[i >> 3] & (1 << (i & 7))) r.fail('padding bit set in null bitmap');
      const row = {};
      columns.forEach((c, i) => {
        if (bitmap[i >> 3] & (1 << (i & 7))) {
          if (!c.nullable) r.fail(`null bit set for non-nullable ${c.name}`);
          row[c.name] = null; return;
        }
        switch (c.type) {
          case 'string': row[c.name] = r.str(c.name); break;
          case 'json': row[c.name] = r.json(c.name); break;
          case 'integer': row[c.name] = r.i64(c.name); break;
          case 'float': row[c.name] = r.f64(c.name); break;
          case 'boolean': row[c.name] = r.bool(c.name); break;
          case 'bytes': row[c.name] = r.bytes(c.name); break;
          default: r.fail(`type ${c.type}`);
        }
      });
      return row;
    },
    decode(u8) { const r = new R(u8); const row = this.decodeFrom(r); r.end('row'); return row; },
  };
}

// ---------------------------------------------------------------- envelope

function frame(type, payload) { return new W().u8(type).u32(payload.length).raw(payload).done(); }

export function encodeRequest({ wireVersion = WIRE_VERSION, clientId, schemaVersion, logEpoch, commits = [], pull, subscriptions = [] }) {
  const w = new W().raw(te.encode('SSP2')).u16(wireVersion).u8(0x01).u8(0);
  const h = new W().str(clientId).i32(schemaVersion);
  if (wireVersion >= 2) h.optStr(logEpoch ?? null);
  w.raw(frame(F.REQ_HEADER, h.done()));
  for (const c of commits) {
    const p = new W().str(c.clientCommitId).u32(c.operations.length);
    for (const op of c.operations) {
      p.str(op.table).str(op.rowId).u8(op.op === 'upsert' ? 1 : 2).optI64(op.baseVersion ?? null).optBytes(op.payload ?? null);
    }
    w.raw(frame(F.PUSH_COMMIT, p.done()));
  }
  if (pull) {
    w.raw(frame(F.PULL_HEADER, new W().i32(pull.limitCommits ?? 0).i32(pull.limitSnapshotRows ?? 0).i32(pull.maxSnapshotPages ?? 0).u8(pull.accept ?? 0b0011).done()));
    for (const s of subscriptions) {
      const p = new W().str(s.id).str(s.table).scopeMap(s.scopes).optStr(s.params ?? null).i64(s.cursor).optStr(s.bootstrapState ?? null);
      w.raw(frame(F.SUBSCRIPTION, p.done()));
    }
  }
  w.raw(frame(F.END, new Uint8Array(0)));
  return w.done();
}

// decodeResponse returns { wireVersion, frames: [{type, ...fields}] }. Row
// payloads are left as bytes; the caller decodes them with its row codec.
export function decodeResponse(u8) {
  const r = new R(u8);
  r.need(8, 'envelope header');
  const magic = td.decode(u8.subarray(0, 4));
  if (magic !== 'SSP2') r.fail(`bad magic ${JSON.stringify(magic)}`);
  r.o = 4;
  const wireVersion = r.u16('wireVersion');
  if (wireVersion !== 1 && wireVersion !== 2) r.fail(`unsupported wireVersion ${wireVersion}`);
  const kind = r.u8('msgKind');
  if (kind !== 0x02) r.fail(`msgKind 0x${kind.toString(16)} is not a response`);
  if (r.u8('flags') !== 0) r.fail('non-zero flags');
  const frames = [];
  let sawEnd = false;
  let sawError = false;
  while (r.left > 0) {
    const type = r.u8('frameType');
    const len = r.u32('frameLength');
    r.need(len, `frame 0x${type.toString(16)} payload`);
    const p = new R(u8.subarray(r.o, r.o + len), r.o);
    r.o += len;
    if (type === F.END) {
      if (len !== 0) r.fail('END with a payload');
      sawEnd = true;
      break;
    }
    if (frames.length === 0 && type !== F.RESP_HEADER) r.fail(`first frame 0x${type.toString(16)} is not RESP_HEADER`);
    if (sawError) r.fail('a frame follows ERROR');
    if (REQUEST_ONLY.has(type)) r.fail(`request frame 0x${type.toString(16)} in a response`);
    frames.push(decodeFrame(type, p, wireVersion));
    if (type === F.ERROR) sawError = true;
  }
  if (!sawEnd) r.fail('truncated: no END frame');
  r.end('message (bytes after END)');
  return { wireVersion, frames };
}

function decodeFrame(type, r, version) {
  let f;
  switch (type) {
    case F.RESP_HEADER:
      f = { requiredSchemaVersion: r.optI32('requiredSchemaVersion'), latestSchemaVersion: r.optI32('latestSchemaVersion') };
      if (version >= 2) {
        f.logEpoch = r.str('logEpoch');
        if (f.logEpoch === '') r.fail('empty logEpoch');
        f.resetRequired = r.bool('resetRequired');
      }
      break;
    case F.PUSH_RESULT: {
      f = { clientCommitId: r.str('clientCommitId') };
      const st = r.u8('status');
      f.status = { 1: 'applied', 2: 'cached', 3: 'rejected' }[st] ?? r.fail(`push status ${st}`);
      f.commitSeq = r.optI64('commitSeq');
      if ((f.commitSeq != null) !== (f.status !== 'rejected')) r.fail('commitSeq presence does not match status');
      f.results = r.list(() => {
        const res = { opIndex: r.i32('opIndex') };
        const s = r.u8('result status');
        if (s === 1) res.status = 'applied';
        else if (s === 2) Object.assign(res, { status: 'conflict', code: r.str(), message: r.str(), serverVersion: r.i64(), serverRow: r.bytes() });
        else if (s === 3) Object.assign(res, { status: 'error', code: r.str(), message: r.str(), retryable: r.bool() });
        else r.fail(`result status ${s}`);
        return res;
      }, 'results');
      break;
    }
    case F.SUB_START: {
      f = { id: r.str('id') };
      const st = r.u8('status');
      f.status = { 1: 'active', 2: 'revoked', 3: 'reset' }[st] ?? r.fail(`sub status ${st}`);
      f.reasonCode = r.str('reasonCode');
      f.effectiveScopes = r.map(() => r.list(() => r.str(), 'scope values'), 'effectiveScopes');
      f.bootstrap = r.bool('bootstrap');
      break;
    }
    case F.COMMIT: {
      f = { commitSeq: r.i64('commitSeq'), createdAtMs: r.i64('createdAtMs'), actorId: r.str('actorId') };
      f.tables = r.list(() => r.str(), 'tables');
      f.changes = r.list(() => {
        const c = { tableIndex: r.u16('tableIndex') };
        if (c.tableIndex >= f.tables.length) r.fail(`tableIndex ${c.tableIndex} out of range`);
        c.table = f.tables[c.tableIndex];
        c.rowId = r.str('rowId');
        const op = r.u8('op');
        c.op = { 1: 'upsert', 2: 'delete' }[op] ?? r.fail(`op ${op}`);
        c.rowVersion = r.optI64('rowVersion');
        c.scopes = r.map(() => r.str(), 'change scopes');
        c.row = r.optBytes('row');
        if ((c.rowVersion != null) !== (c.op === 'upsert') || (c.row != null) !== (c.op === 'upsert')) r.fail('rowVersion/row presence does not match op');
        return c;
      }, 'changes');
      break;
    }
    case F.SEGMENT_REF:
      f = { segmentId: r.str(), mediaType: r.u8(), table: r.str(), byteLength: r.i64(), rowCount: r.i64(), asOfCommitSeq: r.i64(),
        scopeDigest: r.str(), rowCursor: r.optStr(), nextRowCursor: r.optStr(), url: r.optStr(), urlExpiresAtMs: r.optI64() };
      break;
    case F.SEGMENT_INLINE:
      f = { segment: r.b.subarray(0) };
      r.o = r.b.length;
      break;
    case F.SUB_END:
      f = { nextCursor: r.i64('nextCursor'), bootstrapState: r.optJson('bootstrapState') };
      break;
    case F.ERROR:
      f = { code: r.str('code'), message: r.str('message'), category: r.str('category'), retryable: r.bool('retryable'),
        recommendedAction: r.str('recommendedAction'), details: r.optJson('details') };
      break;
    default:
      // LEASE, PUSH_RESULT_DETAILS and unknown frames: kept, not interpreted.
      f = { payload: r.b.subarray(0) };
      r.o = r.b.length;
  }
  r.end(`frame 0x${type.toString(16)}`);
  f.type = type;
  return f;
}

// decodeSegment decodes an SSG2 rows segment (SPEC §5.2), validating its
// column table against the generated schema.
export function decodeSegment(u8, table, schemaVersion, codec) {
  const r = new R(u8);
  r.need(8, 'SSG2 header');
  if (td.decode(u8.subarray(0, 4)) !== 'SSG2') r.fail('bad SSG2 magic');
  r.o = 4;
  if (r.u16('formatVersion') !== 1) r.fail('unsupported SSG2 formatVersion');
  if (r.u16('flags') !== 0) r.fail('non-zero SSG2 flags');
  const segTable = r.str('table');
  const segSchema = r.i32('schemaVersion');
  const n = r.u16('column count');
  const cols = [];
  for (let i = 0; i < n; i++) cols.push({ name: r.str('column name'), type: r.u8('column type'), flags: r.u8('column flags') });
  const want = codec.columns.map((c) => ({ name: c.name, type: TYPE_TAGS[c.type], flags: c.nullable ? 1 : 0 }));
  if (segTable !== table || segSchema !== schemaVersion || JSON.stringify(cols) !== JSON.stringify(want)) {
    throw new Error(`sync.schema_mismatch: segment ${segTable}@${segSchema} ${JSON.stringify(cols)} vs ${table}@${schemaVersion} ${JSON.stringify(want)}`);
  }
  const blocks = [];
  for (;;) {
    const count = r.u32('rowCount');
    if (count === 0) break;
    const len = r.u32('byteLength');
    r.need(len, 'row block');
    const br = new R(u8.subarray(r.o, r.o + len), r.o);
    r.o += len;
    const rows = [];
    for (let i = 0; i < count; i++) {
      const serverVersion = br.i64('serverVersion');
      if (serverVersion < 1) br.fail('serverVersion < 1');
      rows.push({ serverVersion, row: codec.decodeFrom(br) });
    }
    br.end('row block');
    blocks.push(rows);
  }
  r.end('segment (bytes after the end marker)');
  return blocks;
}

export const hex = (u8) => Buffer.from(u8).toString('hex');
