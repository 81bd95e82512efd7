// client.js — a small sync client for the synclane demo: an in-memory store
// of one subscription's rows, an outbox of sparse edits, the sync round over
// POST <mount>/sync, and the realtime socket that says when to pull.
// An example, not a product: rows live in memory only (a reload
// bootstraps again; queued edits are lost with the tab), one table, one
// subscription, no segment downloads by reference, no retries beyond a
// fixed back-off.
import { encodeRequest, decodeResponse, encodeSparseRow, decodeRow, columnNames, Accept } from "./ssp2.js";

const CONTENT_TYPE = "application/vnd.syncular.sync.v2";

const randomId = p => p + "-" + Array.from(crypto.getRandomValues(new Uint8Array(8)), b => b.toString(16).padStart(2, "0")).join("");

/**
 * SyncClient keeps the rows of one subscription converged with the server.
 * Options: base (the sync mount's URL, e.g. "http://127.0.0.1:8787"),
 * actor (development auth's x-actor), table {name, columns, primaryKey},
 * scopes (e.g. {list_id: ["demo"]}), schemaVersion.
 * Events (addEventListener): "change" (rows or outbox changed), "status",
 * "conflict" (detail: {rowId, columns, serverRow, serverVersion, mine, message}),
 * "error" (detail: {code, message}).
 */
export class SyncClient extends EventTarget {
  constructor(opts) {
    super();
    this.base = opts.base.replace(/\/$/, "");
    this.actor = opts.actor;
    this.table = opts.table;
    this.scopes = opts.scopes;
    this.schemaVersion = opts.schemaVersion || 1;
    this.clientId = opts.clientId || randomId("demo");
    this.pk = opts.table.primaryKey || opts.table.columns[0].name;
    this.rows = new Map();      // rowId → {version, values}: the server's state as last pulled
    this.outbox = [];           // [{id, rowId, op, values, baseVersion, inflight}] in edit order
    this.cursor = -1;
    this.bootstrapState = null;
    this.logEpoch = null;
    this.status = { online: navigator.onLine, socket: "closed", syncing: false, lastError: "" };
    this.running = null;        // the sync round in progress (a promise)
    this.again = false;         // another round is wanted after it
    this.ws = null;
    this.retryTimer = null;
    this.stopped = false;
    this.paused = false;        // the page's "work offline" switch
    addEventListener("online", () => { this.setStatus({ online: true }); this.connect(); this.sync(); });
    addEventListener("offline", () => { this.setStatus({ online: false }); this.ws?.close(); });
  }

  /** start opens the realtime socket and runs the first sync round. */
  start() { this.connect(); return this.sync(); }

  /** setPaused turns the client's network off (true) or back on. */
  setPaused(p) {
    this.paused = p;
    if (p) this.ws?.close(); else { this.connect(); this.sync(); }
    this.setStatus({});
  }

  setStatus(s) { Object.assign(this.status, s); this.emit("status", this.status); }
  emit(type, detail) { this.dispatchEvent(new CustomEvent(type, { detail })); }

  // --- the local view -------------------------------------------------

  /** view returns the rows as the user sees them: the server's with the outbox applied. */
  view() {
    const out = new Map();
    for (const [id, r] of this.rows) out.set(id, { ...r.values });
    for (const e of this.outbox) {
      if (e.op === "delete") out.delete(e.rowId);
      else out.set(e.rowId, { ...(out.get(e.rowId) || {}), ...e.values });
    }
    return out;
  }

  /** pending returns the number of edits not yet acknowledged by the server. */
  pending() { return this.outbox.length; }

  /** insert queues a new row (every column). */
  insert(values) { return this.queue(values[this.pk], "upsert", values, null); }

  /** update queues a patch naming only the columns in changes (a v3 sparse push). */
  update(rowId, changes) { return this.queue(rowId, "upsert", { [this.pk]: rowId, ...changes }, this.rows.get(rowId)?.version ?? null); }

  /** remove queues a delete. */
  remove(rowId) { return this.queue(rowId, "delete", null, this.rows.get(rowId)?.version ?? null); }

  queue(rowId, op, values, baseVersion) {
    // Edits of one row not yet sent merge into one operation (union of columns).
    const last = this.outbox.findLast(e => e.rowId === rowId);
    if (last && !last.inflight && op === "upsert" && last.op === "upsert") Object.assign(last.values, values);
    else this.outbox.push({ id: randomId("c"), rowId, op, values, baseVersion, inflight: false });
    this.emit("change");
    return this.sync();
  }

  // --- the sync round -------------------------------------------------

  /** sync runs a sync round now, or once more after the one in progress. */
  sync() {
    if (this.running) { this.again = true; return this.running; }
    this.running = (async () => {
      try {
        do { this.again = false; await this.round(); } while (this.again || this.bootstrapState);
        this.setStatus({ lastError: "" });
      } catch (e) {
        this.setStatus({ lastError: String(e.message || e) });
        this.scheduleRetry();
      } finally {
        this.running = null;
        this.setStatus({ syncing: false });
      }
    })();
    return this.running;
  }

  scheduleRetry() {
    if (this.retryTimer || this.stopped) return;
    this.retryTimer = setTimeout(() => { this.retryTimer = null; this.sync(); }, 2000);
  }

  async post(body) {
    if (this.paused) throw new Error("offline (paused)");
    const res = await fetch(this.base + "/sync", {
      method: "POST", body, headers: { "Content-Type": CONTENT_TYPE, "X-Actor": this.actor },
    });
    const bytes = new Uint8Array(await res.arrayBuffer());
    if (!res.ok) {
      let msg = `HTTP ${res.status}`;
      try { const j = JSON.parse(new TextDecoder().decode(bytes)); msg = `${j.code}: ${j.message}`; } catch { /* not JSON */ }
      throw new Error(msg);
    }
    return decodeResponse(bytes);
  }

  async round() {
    this.setStatus({ syncing: true });
    if (!this.logEpoch) {
      // The epoch handshake: a request without logEpoch learns it.
      const hs = await this.post(encodeRequest({ clientId: this.clientId, schemaVersion: this.schemaVersion, pull: { accept: Accept.inlineRows } }));
      this.readHeader(hs.frames);
    }
    const sent = this.outbox.filter(e => !e.inflight);
    for (const e of sent) e.inflight = true;
    const req = {
      clientId: this.clientId, schemaVersion: this.schemaVersion, logEpoch: this.logEpoch,
      // One commit per row: a conflict on one row rejects only that row's edit.
      pushes: sent.map(e => ({
        clientCommitId: e.id,
        operations: [{ table: this.table.name, rowId: e.rowId, op: e.op, baseVersion: e.baseVersion,
          payload: e.op === "upsert" ? encodeSparseRow(this.table.columns, e.values, this.pk) : null }],
      })),
      pull: { accept: Accept.inlineRows, subscriptions: [{ id: "todos", table: this.table.name, scopes: this.scopes,
        cursor: this.cursor, bootstrapState: this.bootstrapState }] },
    };
    let res;
    try {
      res = await this.post(encodeRequest(req));
    } catch (e) {
      for (const s of sent) s.inflight = false; // stays queued: sent again next round
      throw e;
    }
    this.apply(res.frames, sent);
    this.emit("change");
    if (this.ws?.readyState === WebSocket.OPEN && !this.bootstrapState) {
      this.ws.send(JSON.stringify({ type: "ack", cursor: this.cursor }));
    }
  }

  readHeader(frames) {
    const h = frames.find(f => f.type === "RESP_HEADER");
    if (!h) throw new Error("response without RESP_HEADER");
    if (this.logEpoch && h.logEpoch !== this.logEpoch || h.resetRequired && this.logEpoch) {
      // The server's log was reset: start over from a bootstrap.
      this.rows.clear(); this.cursor = -1; this.bootstrapState = null; this.again = true;
    }
    this.logEpoch = h.logEpoch;
    return h;
  }

  apply(frames, sent) {
    this.readHeader(frames);
    const byCommit = new Map(sent.map(e => [e.id, e]));
    const touched = new Set();
    let bootstrapFresh = this.bootstrapState === null;
    for (const f of frames) {
      switch (f.type) {
        case "PUSH_RESULT": {
          const e = byCommit.get(f.clientCommitId);
          if (!e) break;
          this.outbox.splice(this.outbox.indexOf(e), 1);
          if (f.status !== "rejected") { touched.add(e.rowId); break; }
          for (const o of f.results) {
            if (o.status === "conflict") {
              const serverRow = o.serverRow.length ? decodeRow(o.serverRow, this.table.columns) : null;
              this.emit("conflict", { rowId: e.rowId, columns: columnNames(o.conflictColumns, this.table.columns),
                serverRow, serverVersion: o.serverVersion, mine: e.values, message: o.message, code: o.code });
            } else if (o.status === "error") {
              this.emit("error", { code: o.code, message: o.message });
            }
          }
          break;
        }
        case "SUB_START":
          if (f.status !== "active") { this.cursor = -1; this.bootstrapState = null; this.again = true; }
          if (f.bootstrap && bootstrapFresh) { this.rows.clear(); bootstrapFresh = false; }
          break;
        case "SEGMENT_INLINE":
          for (const { serverVersion, row } of f.segment.rows) this.rows.set(String(row[this.pk]), { version: serverVersion, values: row });
          break;
        case "COMMIT":
          for (const c of f.changes) {
            if (f.tables[c.tableIndex] !== this.table.name) continue;
            if (c.op === "delete") this.rows.delete(c.rowId);
            else this.rows.set(c.rowId, { version: c.rowVersion, values: decodeRow(c.row, this.table.columns) });
          }
          break;
        case "SUB_END":
          this.cursor = f.nextCursor; this.bootstrapState = f.bootstrapState;
          break;
        case "ERROR":
          this.emit("error", { code: f.code, message: f.message });
          if (f.retryable) throw new Error(`${f.code}: ${f.message}`);
          break;
      }
    }
    // Edits queued while our commit of the same row was in flight were
    // based on the version before it: rebase them on the version it made,
    // so a client never conflicts with its own write.
    for (const e of this.outbox) {
      if (!e.inflight && touched.has(e.rowId) && e.baseVersion !== null && this.rows.has(e.rowId)) e.baseVersion = this.rows.get(e.rowId).version;
    }
  }

  // --- the realtime socket --------------------------------------------

  /** connect opens the realtime socket: any delta or wake-up makes the client pull. */
  connect() {
    if (this.stopped || this.paused || (this.ws && this.ws.readyState <= WebSocket.OPEN)) return;
    const url = new URL(this.base + "/realtime", location.href);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    url.searchParams.set("clientId", this.clientId);
    url.searchParams.set("actor", this.actor);
    const ws = new WebSocket(url);
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    this.setStatus({ socket: "connecting" });
    ws.onopen = () => this.setStatus({ socket: "open" });
    ws.onmessage = ev => {
      if (typeof ev.data !== "string") { this.sync(); return; } // a delta: pull it (simplest correct answer)
      let m;
      try { m = JSON.parse(ev.data); } catch { return; }
      if (m.event === "sync" || (m.event === "hello" && m.data?.requiresSync)) this.sync();
    };
    ws.onclose = () => {
      if (this.ws === ws) this.ws = null;
      this.setStatus({ socket: "closed" });
      if (!this.stopped && !this.paused && navigator.onLine) setTimeout(() => this.connect(), 1000);
    };
  }

  /** stop closes the socket and stops retrying. */
  stop() { this.stopped = true; this.ws?.close(); clearTimeout(this.retryTimer); }
}
