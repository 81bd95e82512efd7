// app.js — the demo page: a todo list of list "demo" kept in sync by
// client.js. An example, not a product.
import { SyncClient } from "./client.js";

// The demo schema synclane serve runs by default (schema.MustDemo()).
const todos = {
  name: "todos", primaryKey: "id",
  columns: [
    { name: "id", type: "string", nullable: false },
    { name: "list_id", type: "string", nullable: false },
    { name: "title", type: "string", nullable: false },
    { name: "done", type: "boolean", nullable: false },
    { name: "position", type: "integer", nullable: false },
    { name: "updated_at_ms", type: "integer", nullable: false },
  ],
};

const params = new URLSearchParams(location.search);
const listId = params.get("list") || "demo";
const actor = params.get("actor") || "demo-user";
const mount = document.querySelector('meta[name="synclane-mount"]').content.replace(/\/$/, "");
const client = new SyncClient({ base: location.origin + mount, actor, table: todos, scopes: { list_id: [listId] } });

const $ = s => document.querySelector(s);
$("#list").textContent = listId;
$("#actor").textContent = actor;
$("#client").textContent = client.clientId;

const conflicts = [];

function render() {
  const view = [...client.view().values()].filter(r => r.list_id === listId)
    .sort((a, b) => a.position - b.position || String(a.id).localeCompare(String(b.id)));
  const pending = new Set(client.outbox.map(e => e.rowId));
  const ul = $("#todos");
  const focused = document.activeElement?.closest?.("li")?.dataset.id;
  const keep = new Map([...ul.children].map(li => [li.dataset.id, li]));
  ul.replaceChildren(...view.map(r => {
    let li = keep.get(r.id);
    if (!li) {
      li = document.createElement("li");
      li.dataset.id = r.id;
      li.innerHTML = `<input type="checkbox" class="done" aria-label="done"><input class="title" aria-label="title"><span class="ver"></span><button class="delete" title="delete">✕</button>`;
      li.querySelector(".done").addEventListener("change", ev => client.update(r.id, { done: ev.target.checked }));
      li.querySelector(".title").addEventListener("change", ev => client.update(r.id, { title: ev.target.value }));
      li.querySelector(".delete").addEventListener("click", () => client.remove(r.id));
    }
    li.classList.toggle("done", !!r.done);
    li.classList.toggle("pending", pending.has(r.id));
    li.querySelector(".done").checked = !!r.done;
    const t = li.querySelector(".title");
    if (focused !== r.id || document.activeElement !== t) t.value = r.title;
    li.querySelector(".ver").textContent = client.rows.has(r.id) ? "v" + client.rows.get(r.id).version : "new";
    return li;
  }));
  $("#empty").hidden = view.length > 0;
  $("#cursor").textContent = client.cursor;
  $("#conflicts").hidden = conflicts.length === 0;
  $("#conflict-list").replaceChildren(...conflicts.map(c => {
    const li = document.createElement("li");
    const cols = c.columns.map(k => `${k}: yours ${JSON.stringify(c.mine[k])}, server ${JSON.stringify(c.serverRow?.[k])}`).join("; ");
    li.textContent = !c.columns.length ? c.message : `“${c.serverRow?.title ?? c.rowId}” changed on the server (v${c.serverVersion}) — ${cols}. The server's value was kept.`;
    li.dataset.columns = c.columns.join(",");
    return li;
  }));
  renderStatus();
}

function renderStatus() {
  const s = client.status, el = $("#status");
  let text, cls;
  if (client.paused || !s.online) { text = "offline"; cls = "offline"; }
  else if (s.lastError) { text = "retrying: " + s.lastError; cls = "offline"; }
  else if (s.syncing) { text = "syncing…"; cls = "syncing"; }
  else if (s.socket === "open") { text = "live"; cls = "live"; }
  else { text = "socket " + s.socket; cls = "syncing"; }
  const n = client.pending();
  el.textContent = text + (n ? ` · ${n} pending` : "");
  el.className = "status " + cls;
}

client.addEventListener("change", render);
client.addEventListener("status", renderStatus);
client.addEventListener("conflict", ev => { conflicts.unshift(ev.detail); conflicts.splice(5); render(); });
client.addEventListener("error", ev => { conflicts.unshift({ rowId: "", columns: [], mine: {}, serverRow: null, serverVersion: 0, message: ev.detail.message }); render(); });

$("#add").addEventListener("submit", ev => {
  ev.preventDefault();
  const title = $("#new-title").value.trim();
  if (!title) return;
  $("#new-title").value = "";
  const now = Date.now();
  client.insert({ id: crypto.randomUUID(), list_id: listId, title, done: false, position: now, updated_at_ms: now });
});
$("#offline").addEventListener("change", ev => client.setPaused(ev.target.checked));

// For the browser test and the curious: the client and the conflicts shown.
window.demo = { client, conflicts };
render();
client.start();
