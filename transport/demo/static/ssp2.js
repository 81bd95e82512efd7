// ssp2.js — the parts of the SSP2 wire codec (wire version 3) that the
// synclane demo needs: request encoding (REQ_HEADER, PUSH_COMMIT with sparse
// row payloads, PULL_HEADER, SUBSCRIPTION) and response decoding
// (RESP_HEADER, PUSH_RESULT, SUB_START, COMMIT, SEGMENT_INLINE, SUB_END,
// ERROR; every other frame is skipped). An example, not a product: no
// SEGMENT_REF downloads, no blob references, no CRDT merging.
//
// Layout (little-endian): envelope "SSP2", u16 wireVersion, u8 kind
// (1 request, 2 response), u8 flags (0); then frames of u8 type, u32 length,
// payload; a frame of type 0 and length 0 ends the message. str and bytes
// are u32 length + bytes; opt is a presence byte 0/1; i64 stays within
// ±(2^53-1).

export const WIRE_VERSION = 3;

export const Frame = Object.freeze({
  END: 0x00, REQ_HEADER: 0x01, PUSH_COMMIT: 0x02, PULL_HEADER: 0x03, SUBSCRIPTION: 0x04,
  RESP_HEADER: 0x10, PUSH_RESULT: 0x11, SUB_START: 0x12, COMMIT: 0x13, SEGMENT_REF: 0x14,
  SEGMENT_INLINE: 0x15, SUB_END: 0x16, LEASE: 0x19, PUSH_RESULT_DETAILS: 0x1b, ERROR: 0x1f,
});

// Column type tags (SPEC §2.3).
export const Type = Object.freeze({ string: 1, integer: 2, float: 3, boolean: 4, json: 5, bytes: 6, blob_ref: 7, crdt: 8 });
const typeByTag = Object.fromEntries(Object.entries(Type).map(([k, v]) => [v, k]));

export const Accept = Object.freeze({ inlineRows: 1, refRows: 2, sqlite: 4, signedUrls: 8 });
export const CommitStatus = Object.freeze({ 1: "applied", 2: "cached", 3: "rejected" });
export const OpStatus = Object.freeze({ 1: "applied", 2: "conflict", 3: "error" });
export const SubStatus = Object.freeze({ 1: "active", 2: "revoked", 3: "reset" });

const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder("utf-8", { fatal: true });

/** Writer appends little-endian values to a growing buffer. */
export class Writer {
  constructor() { this.buf = new Uint8Array(256); this.view = new DataView(this.buf.buffer); this.n = 0; }
  grow(k) {
    if (this.n + k <= this.buf.length) return;
    const b = new Uint8Array(Math.max(this.buf.length * 2, this.n + k));
    b.set(this.buf.subarray(0, this.n));
    this.buf = b; this.view = new DataView(b.buffer);
  }
  u8(v) { this.grow(1); this.buf[this.n++] = v; }
  u16(v) { this.grow(2); this.view.setUint16(this.n, v, true); this.n += 2; }
  u32(v) { this.grow(4); this.view.setUint32(this.n, v, true); this.n += 4; }
  i32(v) { this.grow(4); this.view.setInt32(this.n, v, true); this.n += 4; }
  i64(v) {
    if (!Number.isSafeInteger(v)) throw new RangeError(`i64 ${v} outside ±(2^53-1)`);
    this.grow(8); this.view.setBigInt64(this.n, BigInt(v), true); this.n += 8;
  }
  f64(v) { this.grow(8); this.view.setFloat64(this.n, v, true); this.n += 8; }
  bool(v) { this.u8(v ? 1 : 0); }
  raw(b) { this.grow(b.length); this.buf.set(b, this.n); this.n += b.length; }
  bytes(b) { this.u32(b.length); this.raw(b); }
  str(s) { this.bytes(utf8.encode(s)); }
  /** at returns the offset of the next byte, to patch a length later. */
  at() { return this.n; }
  patchU32(off, v) { this.view.setUint32(off, v, true); }
  done() { return this.buf.slice(0, this.n); }
}

/** Reader reads little-endian values; every overrun throws. */
export class Reader {
  constructor(b) { this.b = b; this.view = new DataView(b.buffer, b.byteOffset, b.byteLength); this.off = 0; }
  need(k, what) { if (this.off + k > this.b.length) throw new Error(`ssp2: truncated ${what} at ${this.off}`); }
  u8(w = "u8") { this.need(1, w); return this.b[this.off++]; }
  u16(w = "u16") { this.need(2, w); const v = this.view.getUint16(this.off, true); this.off += 2; return v; }
  u32(w = "u32") { this.need(4, w); const v = this.view.getUint32(this.off, true); this.off += 4; return v; }
  i32(w = "i32") { this.need(4, w); const v = this.view.getInt32(this.off, true); this.off += 4; return v; }
  i64(w = "i64") {
    this.need(8, w);
    const v = Number(this.view.getBigInt64(this.off, true)); this.off += 8;
    if (!Number.isSafeInteger(v)) throw new Error(`ssp2: ${w} outside ±(2^53-1)`);
    return v;
  }
  f64(w = "f64") { this.need(8, w); const v = this.view.getFloat64(this.off, true); this.off += 8; return v; }
  bool(w = "bool") {
    const v = this.u8(w);
    if (v > 1) throw new Error(`ssp2: ${w}: byte ${v} is not 0 or 1`);
    return v === 1;
  }
  opt(w) { return this.bool(w); }
  bytes(w = "bytes") { const n = this.u32(w); this.need(n, w); const v = this.b.subarray(this.off, this.off + n); this.off += n; return v; }
  str(w = "str") { return fromUtf8.decode(this.bytes(w)); }
  end() { return this.off >= this.b.length; }
}

// --- rows -------------------------------------------------------------

function writeValue(w, col, v) {
  switch (col.type) {
    case "string": case "blob_ref": w.str(String(v)); break;
    case "integer": w.i64(v); break;
    case "float": w.f64(v); break;
    case "boolean": w.bool(v); break;
    case "json": w.str(typeof v === "string" ? v : JSON.stringify(v)); break;
    case "bytes": case "crdt": w.bytes(v); break;
    default: throw new Error(`ssp2: column ${col.name}: unsupported type ${col.type}`);
  }
}

function readValue(r, col) {
  switch (col.type) {
    case "string": case "blob_ref": return r.str(col.name);
    case "integer": return r.i64(col.name);
    case "float": return r.f64(col.name);
    case "boolean": return r.bool(col.name);
    case "json": return JSON.parse(r.str(col.name));
    case "bytes": case "crdt": return r.bytes(col.name).slice();
    default: throw new Error(`ssp2: column ${col.name}: unsupported type ${col.type}`);
  }
}

/**
 * encodeSparseRow returns the v3 sparse-row payload of a push (SPEC §2.4):
 * a presence bitmap over the table's columns, a null bitmap over the
 * present columns, then the present non-null values in column order.
 * values is an object keyed by column name; only its keys are present, and
 * it must hold the primary key.
 */
export function encodeSparseRow(columns, values, pk = columns[0].name) {
  if (!(pk in values)) throw new Error(`ssp2: sparse row without its primary key ${pk}`);
  const w = new Writer();
  const presence = new Uint8Array((columns.length + 7) >> 3);
  const present = [];
  columns.forEach((c, i) => { if (Object.hasOwn(values, c.name)) { presence[i >> 3] |= 1 << (i & 7); present.push(c); } });
  w.raw(presence);
  const nulls = new Uint8Array((present.length + 7) >> 3);
  present.forEach((c, j) => {
    if (values[c.name] === null) {
      if (!c.nullable) throw new Error(`ssp2: column ${c.name} is not nullable`);
      nulls[j >> 3] |= 1 << (j & 7);
    }
  });
  w.raw(nulls);
  for (const c of present) if (values[c.name] !== null) writeValue(w, c, values[c.name]);
  return w.done();
}

/** readRow reads a full row (COMMIT rows, segment rows, serverRow) into an object keyed by column name. */
export function readRow(r, columns) {
  const n = (columns.length + 7) >> 3;
  r.need(n, "row null bitmap");
  const nulls = r.b.subarray(r.off, r.off + n); r.off += n;
  const row = {};
  columns.forEach((c, i) => { row[c.name] = (nulls[i >> 3] >> (i & 7)) & 1 ? null : readValue(r, c); });
  return row;
}

/** decodeRow decodes the bytes of exactly one full row. */
export function decodeRow(b, columns) {
  const r = new Reader(b);
  const row = readRow(r, columns);
  if (!r.end()) throw new Error("ssp2: trailing bytes after row");
  return row;
}

/** columnNames lists the names of the columns a ColumnSet (bitmap over the table's columns) holds. */
export function columnNames(set, columns) {
  return columns.filter((_, i) => set && (set[i >> 3] >> (i & 7)) & 1).map(c => c.name);
}

/** decodeSegment decodes an SSG2 rows segment: {table, schemaVersion, columns, rows: [{serverVersion, row}]}. */
export function decodeSegment(b) {
  const r = new Reader(b);
  r.need(8, "SSG2 header");
  if (fromUtf8.decode(b.subarray(0, 4)) !== "SSG2") throw new Error("ssp2: bad SSG2 magic");
  r.off = 4;
  if (r.u16() !== 1) throw new Error("ssp2: unsupported SSG2 formatVersion");
  if (r.u16() !== 0) throw new Error("ssp2: SSG2 flags must be 0");
  const seg = { table: r.str("table"), schemaVersion: r.i32(), columns: [], rows: [] };
  const nc = r.u16();
  for (let i = 0; i < nc; i++) {
    const name = r.str("column name"), tag = r.u8(), flags = r.u8();
    seg.columns.push({ name, type: typeByTag[tag], nullable: (flags & 1) === 1 });
  }
  for (;;) {
    const count = r.u32("block rowCount");
    if (count === 0) break;
    const len = r.u32("block byteLength"), end = r.off + len;
    for (let i = 0; i < count; i++) seg.rows.push({ serverVersion: r.i64("serverVersion"), row: readRow(r, seg.columns) });
    if (r.off !== end) throw new Error("ssp2: SSG2 block byteLength mismatch");
  }
  return seg;
}

// --- requests ---------------------------------------------------------

function frame(w, type, body) {
  w.u8(type);
  const at = w.at();
  w.u32(0);
  body();
  w.patchU32(at, w.at() - at - 4);
}

function listMap(w, m) {
  const keys = Object.keys(m || {}).sort(); // UTF-16 code-unit order, as the wire requires
  w.u32(keys.length);
  for (const k of keys) { w.str(k); w.u32(m[k].length); for (const v of m[k]) w.str(v); }
}

function optJSON(w, v) {
  if (v === null || v === undefined) { w.u8(0); return; }
  w.u8(1); w.str(typeof v === "string" ? v : JSON.stringify(v));
}

/**
 * encodeRequest encodes one request message at wire version 3:
 *   {clientId, schemaVersion, logEpoch?,
 *    pushes: [{clientCommitId, operations: [{table, rowId, op: "upsert"|"delete", baseVersion?, payload?}]}],
 *    pull?: {limitCommits, limitSnapshotRows, maxSnapshotPages, accept,
 *            subscriptions: [{id, table, scopes, params?, cursor, bootstrapState?}]}}
 * payload is the sparse row bytes (encodeSparseRow) of an upsert.
 */
export function encodeRequest(req) {
  const w = new Writer();
  w.raw(utf8.encode("SSP2")); w.u16(WIRE_VERSION); w.u8(1); w.u8(0);
  frame(w, Frame.REQ_HEADER, () => {
    w.str(req.clientId); w.i32(req.schemaVersion);
    if (req.logEpoch) { w.u8(1); w.str(req.logEpoch); } else w.u8(0);
  });
  for (const c of req.pushes || []) {
    frame(w, Frame.PUSH_COMMIT, () => {
      w.str(c.clientCommitId); w.u32(c.operations.length);
      for (const op of c.operations) {
        w.str(op.table); w.str(op.rowId); w.u8(op.op === "delete" ? 2 : 1);
        if (op.baseVersion === null || op.baseVersion === undefined) w.u8(0); else { w.u8(1); w.i64(op.baseVersion); }
        if (op.op === "delete") w.u8(0); else { w.u8(1); w.bytes(op.payload); }
      }
    });
  }
  if (req.pull) {
    const p = req.pull;
    frame(w, Frame.PULL_HEADER, () => {
      w.i32(p.limitCommits || 0); w.i32(p.limitSnapshotRows || 0); w.i32(p.maxSnapshotPages || 0);
      w.u8(p.accept ?? Accept.inlineRows);
    });
    for (const s of p.subscriptions || []) {
      frame(w, Frame.SUBSCRIPTION, () => {
        w.str(s.id); w.str(s.table); listMap(w, s.scopes); optJSON(w, s.params);
        w.i64(s.cursor); optJSON(w, s.bootstrapState);
      });
    }
  }
  w.u8(Frame.END); w.u32(0);
  return w.done();
}

// --- responses --------------------------------------------------------

function readStrMap(r) {
  const m = {}, n = r.u32("map count");
  for (let i = 0; i < n; i++) { const k = r.str("map key"); m[k] = r.str("map value"); }
  return m;
}

function readListMap(r) {
  const m = {}, n = r.u32("map count");
  for (let i = 0; i < n; i++) {
    const k = r.str("map key"), c = r.u32("values"), vs = [];
    for (let j = 0; j < c; j++) vs.push(r.str("map value"));
    m[k] = vs;
  }
  return m;
}

const optJSONText = (r, w) => (r.opt(w) ? JSON.parse(r.str(w)) : null);

const decoders = {
  [Frame.RESP_HEADER]: r => ({
    type: "RESP_HEADER",
    requiredSchemaVersion: r.opt("requiredSchemaVersion") ? r.i32() : null,
    latestSchemaVersion: r.opt("latestSchemaVersion") ? r.i32() : null,
    logEpoch: r.str("logEpoch"),
    resetRequired: r.bool("resetRequired"),
  }),
  [Frame.PUSH_RESULT]: r => {
    const f = { type: "PUSH_RESULT", clientCommitId: r.str(), status: CommitStatus[r.u8("status")] };
    f.commitSeq = r.opt("commitSeq") ? r.i64() : null;
    f.results = [];
    for (let i = 0, n = r.u32("results"); i < n; i++) {
      const o = { opIndex: r.i32(), status: OpStatus[r.u8("result status")] };
      if (o.status === "conflict") {
        o.code = r.str(); o.message = r.str(); o.serverVersion = r.i64();
        o.serverRow = r.bytes("serverRow").slice(); o.conflictColumns = r.bytes("conflictColumns").slice();
      } else if (o.status === "error") {
        o.code = r.str(); o.message = r.str(); o.retryable = r.bool();
      }
      f.results.push(o);
    }
    return f;
  },
  [Frame.SUB_START]: r => ({
    type: "SUB_START", id: r.str(), status: SubStatus[r.u8("status")], reasonCode: r.str(),
    effectiveScopes: readListMap(r), bootstrap: r.bool("bootstrap"),
  }),
  [Frame.COMMIT]: r => {
    const f = { type: "COMMIT", commitSeq: r.i64(), createdAtMs: r.i64(), actorId: r.str(), tables: [], changes: [] };
    for (let i = 0, n = r.u32("tables"); i < n; i++) f.tables.push(r.str());
    for (let i = 0, n = r.u32("changes"); i < n; i++) {
      const c = { tableIndex: r.u16(), rowId: r.str(), op: r.u8("op") === 2 ? "delete" : "upsert" };
      c.rowVersion = r.opt("rowVersion") ? r.i64() : null;
      c.scopes = readStrMap(r);
      c.row = r.opt("row") ? r.bytes("row").slice() : null;
      f.changes.push(c);
    }
    return f;
  },
  // SEGMENT_INLINE's payload is the whole frame payload (an SSG2 segment).
  [Frame.SEGMENT_INLINE]: r => { const segment = decodeSegment(r.b); r.off = r.b.length; return { type: "SEGMENT_INLINE", segment }; },
  [Frame.SUB_END]: r => ({ type: "SUB_END", nextCursor: r.i64(), bootstrapState: optJSONText(r, "bootstrapState") }),
  [Frame.ERROR]: r => ({
    type: "ERROR", code: r.str(), message: r.str(), category: r.str(), retryable: r.bool(),
    recommendedAction: r.str(), details: optJSONText(r, "details"),
  }),
};

/**
 * decodeResponse decodes a response message into {wireVersion, frames}.
 * Frames this module does not know come back as {type: "UNKNOWN", frameType}.
 */
export function decodeResponse(b) {
  const r = new Reader(b);
  r.need(8, "envelope");
  if (fromUtf8.decode(b.subarray(0, 4)) !== "SSP2") throw new Error("ssp2: bad magic");
  r.off = 4;
  const wireVersion = r.u16(), kind = r.u8(), flags = r.u8();
  if (wireVersion !== WIRE_VERSION) throw new Error(`ssp2: wire version ${wireVersion}, this client reads ${WIRE_VERSION}`);
  if (kind !== 2 || flags !== 0) throw new Error("ssp2: not a response envelope");
  const frames = [];
  for (;;) {
    const type = r.u8("frame type"), len = r.u32("frame length");
    if (type === Frame.END) {
      if (len !== 0 || !r.end()) throw new Error("ssp2: bad END frame");
      return { wireVersion, frames };
    }
    r.need(len, "frame payload");
    const payload = b.subarray(r.off, r.off + len);
    r.off += len;
    const dec = decoders[type];
    if (!dec) { frames.push({ type: "UNKNOWN", frameType: type }); continue; }
    const fr = new Reader(payload);
    const f = dec(fr);
    if (!fr.end()) throw new Error(`ssp2: frame 0x${type.toString(16)}: trailing bytes`);
    frames.push(f);
  }
}
