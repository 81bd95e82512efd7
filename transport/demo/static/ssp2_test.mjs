// ssp2_test.mjs — checks ssp2.js against the SSP2 wire-version-3 golden
// vectors: run `node ssp2_test.mjs <vectors-v3 dir>` (transport/demo's
// TestClientCodecVectors does). Requests and sparse push rows must encode
// to the vectors' bytes; responses must decode to the vectors' frames (the
// fields the demo reads). Prints one line per case; exits 1 on a mismatch.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { encodeRequest, encodeSparseRow, decodeResponse, decodeSegment, Frame } from "./ssp2.js";

const dir = process.argv[2];
const b64 = s => Uint8Array.from(Buffer.from(s, "base64"));
const hex = b => Buffer.from(b).toString("hex");
let failed = 0;
const check = (name, ok, why = "") => { console.log(`${ok ? "ok  " : "FAIL"} ${name}${ok ? "" : ": " + why}`); if (!ok) failed++; };
const cases = kind => JSON.parse(readFileSync(join(dir, kind, "manifest.json"), "utf8"));
const load = (kind, c) => [JSON.parse(readFileSync(join(dir, kind, c.json), "utf8")), new Uint8Array(readFileSync(join(dir, kind, c.bin)))];

// Requests: JSON rendering → encodeRequest → the vector's bytes.
for (const c of cases("request").cases) {
  const [v, bin] = load("request", c);
  const req = { pushes: [] };
  for (const f of v.frames) {
    switch (f.type) {
      case "REQ_HEADER": Object.assign(req, { clientId: f.clientId, schemaVersion: f.schemaVersion, logEpoch: f.logEpoch }); break;
      case "PUSH_COMMIT": req.pushes.push({ clientCommitId: f.clientCommitId, operations: f.operations.map(o => ({ ...o, payload: o.payload ? b64(o.payload) : null })) }); break;
      case "PULL_HEADER": req.pull = { ...f, subscriptions: [] }; break;
      case "SUBSCRIPTION": req.pull.subscriptions.push(f); break;
      default: throw new Error("unexpected frame " + f.type);
    }
  }
  const got = encodeRequest(req);
  check("request/" + c.name, hex(got) === hex(bin), `got ${hex(got)}\nwant ${hex(bin)}`);
}

// Sparse push rows: values → encodeSparseRow → the vector's bytes.
const push = cases("push");
for (const c of push.cases) {
  const [v, bin] = load("push", c);
  const values = {};
  for (const [k, x] of Object.entries(v.values)) {
    const col = v.columns.find(col => col.name === k);
    values[k] = x !== null && (col.type === "bytes" || col.type === "crdt") ? b64(x) : x;
  }
  const got = encodeSparseRow(v.columns, values, push.primaryKey || "id");
  check("push/" + c.name, hex(got) === hex(bin), `got ${hex(got)}\nwant ${hex(bin)}`);
}

// Responses: the vector's bytes → decodeResponse → the frames it renders.
const known = new Set(["RESP_HEADER", "PUSH_RESULT", "SUB_START", "COMMIT", "SEGMENT_INLINE", "SUB_END", "ERROR"]);
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
for (const c of cases("response").cases) {
  const [v, bin] = load("response", c);
  let m;
  try { m = decodeResponse(bin); } catch (e) { check("response/" + c.name, false, e.message); continue; }
  const why = [];
  if (m.frames.length !== v.frames.length) why.push(`${m.frames.length} frames, want ${v.frames.length}`);
  v.frames.forEach((want, i) => {
    const got = m.frames[i] || {};
    if (!known.has(want.type)) { if (got.type !== "UNKNOWN") why.push(`frame ${i}: ${got.type}, want it skipped`); return; }
    if (got.type !== want.type) { why.push(`frame ${i}: ${got.type}, want ${want.type}`); return; }
    const fields = {
      RESP_HEADER: ["logEpoch", "resetRequired"],
      PUSH_RESULT: ["clientCommitId", "status", "commitSeq"],
      SUB_START: ["id", "status", "reasonCode", "effectiveScopes", "bootstrap"],
      COMMIT: ["commitSeq", "createdAtMs", "actorId", "tables"],
      SUB_END: ["nextCursor", "bootstrapState"],
      ERROR: ["code", "message", "category", "retryable", "recommendedAction", "details"],
      SEGMENT_INLINE: [],
    }[want.type];
    for (const k of fields) if (!same(got[k] ?? null, want[k] ?? null)) why.push(`frame ${i} ${want.type}.${k}: ${JSON.stringify(got[k])}, want ${JSON.stringify(want[k])}`);
    if (want.type === "PUSH_RESULT") {
      want.results.forEach((r, j) => {
        const g = got.results[j] || {};
        if (g.status !== r.status || g.opIndex !== r.opIndex) why.push(`result ${j}: ${g.status}`);
        if (r.status === "conflict" && (hex(g.serverRow) !== hex(b64(r.serverRow)) || hex(g.conflictColumns) !== hex(b64(r.conflictColumns)) || g.serverVersion !== r.serverVersion)) why.push(`result ${j}: conflict fields differ`);
      });
    }
    if (want.type === "COMMIT" && !same(got.changes.map(x => [x.rowId, x.op, x.rowVersion, x.scopes]), want.changes.map(x => [x.rowId, x.op, x.rowVersion ?? null, x.scopes]))) why.push(`frame ${i} COMMIT changes differ`);
    if (want.type === "SEGMENT_INLINE" && want.payload) {
      const seg = decodeSegment(b64(want.payload));
      if (!same(got.segment.rows.map(r => r.serverVersion), seg.rows.map(r => r.serverVersion)) || seg.rows.length === 0) why.push("segment rows differ");
    }
  });
  check("response/" + c.name, why.length === 0, why.join("; "));
}
process.exit(failed ? 1 : 0);
