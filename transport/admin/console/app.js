// synclane admin console: plain ES module, no build step. Talks to the
// admin API next to this page with the token kept in sessionStorage.
import { natSortBy } from './natsort.js';

const TOKEN_KEY = 'synclane-admin-token';
const $ = (sel) => document.querySelector(sel);
const page = $('#page');

// ---- DOM and formatting helpers --------------------------------------
function h(tag, attrs = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid === undefined || kid === null || kid === false) continue;
    el.append(kid instanceof Node ? kid : String(kid));
  }
  return el;
}
const enc = encodeURIComponent;
const link = (hash, text, attrs = {}) => h('a', { href: '#' + hash, ...attrs }, text);
function fmtTime(ms) { return ms ? new Date(ms).toLocaleString() : '—'; }
// plural spells a count with its noun: 1 commit, 2 commits, 0 passes,
// 3 entries, 2 queries. many overrides the English rule.
function pluralOf(one) {
  if (/(s|x|z|ch|sh)$/.test(one)) return one + 'es';
  if (/[^aeiou]y$/.test(one)) return one.slice(0, -1) + 'ies';
  return one + 's';
}
function plural(n, one, many) { n = Number(n || 0); return `${n.toLocaleString()} ${n === 1 ? one : (many || pluralOf(one))}`; }
function fmtNum(n) { return Number(n || 0).toLocaleString(); }
function fmtDur(ms) {
  if (!ms) return '0 ms';
  if (ms < 1000) return `${ms.toFixed(ms < 10 ? 2 : 0)} ms`;
  const s = ms / 1000;
  if (s < 120) return `${s.toFixed(1)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} days`;
}
function fmtBytes(b) {
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0; b = Number(b || 0);
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return `${b.toFixed(i ? 1 : 0)} ${u[i]}`;
}
function ago(ms) { return ms ? `${fmtDur(Date.now() - ms)} ago` : 'never'; }
function card(label, value, sub) { return h('div', { class: 'card' }, h('small', {}, label), h('b', {}, value), sub ? h('small', {}, sub) : null); }
function table(head, rows, attrs = {}) {
  return h('table', attrs, h('thead', {}, h('tr', {}, head.map(c => h('th', { class: c.num ? 'num' : '' }, c.label || c)))),
    h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: head.length, class: 'muted' }, 'nothing here'))));
}
function td(v, num) { return h('td', { class: num ? 'num' : '' }, v); }

// label turns a camelCase key into words ("commitsApplied" → "commits
// applied"); other keys (error codes, column names) stay as they are.
function label(k) { return /^[a-z][a-zA-Z0-9]*$/.test(k) ? k.replace(/([a-z0-9])([A-Z])/g, '$1 $2').toLowerCase() : k; }
const MAX_TABLE_ROWS = 50;
// view renders any JSON value as HTML: objects as key/value tables,
// arrays of objects as tables with a column per key, scalars as text.
// Bounded: at most MAX_TABLE_ROWS rows per table.
function view(v, key = '') {
  if (v === null || v === undefined || v === '') return h('span', { class: 'muted' }, '—');
  if (typeof v === 'boolean') return h('span', { class: 'tag' + (v ? ' ok' : '') }, v ? 'yes' : 'no');
  if (typeof v === 'number') {
    if (/Bytes$|^bytes/.test(key)) return fmtBytes(v);
    if (/Ms$/.test(key) && /At|Last|last|updated|created/.test(key)) return fmtTime(v);
    if (/Ms$/.test(key)) return fmtDur(v);
    return Number.isInteger(v) ? fmtNum(v) : v.toLocaleString(undefined, { maximumFractionDigits: 3 });
  }
  if (typeof v !== 'object') return String(v);
  const more = (n) => n > MAX_TABLE_ROWS ? h('tr', {}, h('td', { colspan: 99, class: 'muted' }, `… ${plural(n - MAX_TABLE_ROWS, 'more row')}`)) : null;
  if (Array.isArray(v)) {
    if (!v.length) return h('span', { class: 'muted' }, 'none');
    if (v.every(x => x === null || typeof x !== 'object')) return v.slice(0, MAX_TABLE_ROWS).join(', ') + (v.length > MAX_TABLE_ROWS ? ' …' : '');
    const cols = [...new Set(v.slice(0, MAX_TABLE_ROWS).flatMap(x => x && typeof x === 'object' ? Object.keys(x) : []))];
    return h('table', { class: 'stats' }, h('thead', {}, h('tr', {}, cols.map(c => h('th', {}, label(c))))),
      h('tbody', {}, v.slice(0, MAX_TABLE_ROWS).map(x => h('tr', {}, cols.map(c => h('td', { class: typeof x?.[c] === 'number' ? 'num' : '' }, view(x?.[c], c))))), more(v.length)));
  }
  const entries = Object.entries(v);
  if (!entries.length) return h('span', { class: 'muted' }, 'none');
  return h('table', { class: 'stats kv' }, h('tbody', {}, entries.slice(0, MAX_TABLE_ROWS).map(([k, x]) =>
    h('tr', { 'data-key': k }, h('th', {}, label(k)), h('td', { class: typeof x === 'number' ? 'num' : '' }, view(x, k)))), more(entries.length)));
}
function sectionViews(sections) {
  return (sections || []).map(s => h('div', { class: 'section', 'data-section': s.name }, h('h3', {}, s.name),
    s.error ? h('p', { class: 'tag bad' }, s.error) : view(s.stats)));
}

// ---- errors and the token ---------------------------------------------
function showError(msg) { const e = $('#error'); e.textContent = msg; e.hidden = !msg; }
class ApiError extends Error { constructor(status, code, message) { super(message); this.status = status; this.code = code; } }
function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }
function showLogin(msg) {
  $('#login').hidden = false; page.replaceChildren(); $('#logout').hidden = true;
  showError(msg || '');
}
$('#login').addEventListener('submit', (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $('#token').value.trim());
  $('#token').value = '';
  $('#login').hidden = true;
  route(); events.start();
});
$('#logout').addEventListener('click', () => { sessionStorage.removeItem(TOKEN_KEY); events.stop(); clustered = undefined; $('#cluster-link').hidden = true; showLogin('Token forgotten.'); });

async function api(path, opts = {}) {
  let res;
  try {
    res = await fetch('api/' + path, { ...opts, headers: { Authorization: 'Bearer ' + token(), ...(opts.headers || {}) } });
  } catch (e) {
    throw new ApiError(0, 'network', `The server did not answer (${e.message}). Is it running?`);
  }
  let body = null;
  try { body = await res.json(); } catch { /* not JSON */ }
  if (!res.ok) {
    const code = body?.error?.code || `http.${res.status}`;
    const msg = body?.error?.message || res.statusText;
    if (res.status === 401) { sessionStorage.removeItem(TOKEN_KEY); events.stop(); }
    throw new ApiError(res.status, code, `${msg} (${code}, HTTP ${res.status})`);
  }
  return body;
}

// ---- paging -----------------------------------------------------------
// pager renders a paged table: load(cursor) returns {items, next}; rows
// maps items to <tr>s. Previous pages are remembered as a cursor stack.
// With sortKey, each page's items are shown in natural order of their key
// ("c2" before "c10"); the pages themselves follow the API's cursor order.
function pager(id, head, load, rows, sortKey) {
  const box = h('div', { id });
  const stack = [''];
  const info = h('span', { class: 'muted' });
  const prev = h('button', { type: 'button', class: 'prev' }, '◀ Newer/previous');
  const next = h('button', { type: 'button', class: 'next' }, 'Next ▶');
  let nextCursor = '';
  // Both buttons stay disabled until a page has loaded (a click before
  // that would page from a cursor not known yet).
  // show loads the current page; reload (a live refresh) does it again
  // and lets the caller see a failure instead of the banner.
  async function show(rethrow) {
    prev.disabled = next.disabled = true;
    try {
      const res = await load(stack[stack.length - 1]);
      nextCursor = res.next;
      box.querySelector('table')?.remove();
      box.append(table(head, (sortKey ? natSortBy(res.items, sortKey) : res.items).map(rows)));
      prev.disabled = stack.length === 1; next.disabled = !res.next;
      info.textContent = `page ${stack.length} · ${plural(res.items.length, 'entry')}`;
    } catch (e) { prev.disabled = stack.length === 1; if (rethrow) throw e; handle(e); }
  }
  box.reload = () => show(true);
  prev.addEventListener('click', () => { if (stack.length > 1) { stack.pop(); show(); } });
  next.addEventListener('click', () => { if (nextCursor) { stack.push(nextCursor); show(); } });
  box.append(h('div', { class: 'pager' }, prev, next, info));
  show();
  return box;
}

function handle(e) {
  if (e.status === 401) { showLogin('The admin token was refused: ' + e.message); return; }
  showError(e.message || String(e));
}

// ---- views ------------------------------------------------------------
function crumbs(...parts) {
  $('#crumbs').replaceChildren(...parts.flatMap((p, i) => i ? [' / ', p] : [p]));
}

// overviewCards are the overview's counters (refreshed live).
function overviewCards(o) {
  const rq = o.requests || {};
  const ret = o.retention || {};
  return [
    card('Serve gate', o.ready ? h('span', { class: 'tag ok' }, 'open') : h('span', { class: 'tag bad' }, 'closed'), o.readyError || `schema v${o.schemaVersion}`),
    card('Requests', h('span', { id: 'requests-count' }, fmtNum(rq.requests)), `${plural(rq.commitsApplied, 'commit')} applied, ${fmtNum(rq.commitsRejected)} rejected`),
    card('Live partition actors', fmtNum(o.actors?.liveActors), `${fmtNum(o.actors?.passivated)} passivated, ${plural(o.actors?.restarts, 'restart')}`),
    card('Retention', `${fmtDur(ret.activeWindowMs)} window`, `force after ${fmtDur(ret.ageForceMs)}, keep ${plural(ret.minRetainedCommits, 'commit')}`),
    card('Segments', `${fmtNum(o.segments?.built)} built`, `${fmtNum(o.segments?.served)} served, ${fmtBytes(o.segments?.servedBytes)}`),
    card('Events', plural(o.events?.emitted, 'event'), `${fmtNum(o.events?.retained)} of ${fmtNum(o.events?.size)} kept, ${plural(o.events?.droppedSubscribers, 'slow reader')} dropped`),
    ...featureCards(o.sections || []),
  ];
}

function checkpointsTable(o) {
  return table(['Partition', 'Name', 'State', { label: 'Watermark', num: 1 }, { label: 'Owner epoch', num: 1 }, 'Updated'],
    (o.checkpoints || []).map(c => h('tr', {}, td(c.partition), td(c.name), td(c.state), td(fmtNum(c.watermark), 1), td(fmtNum(c.ownerEpoch), 1), td(fmtTime(c.updatedAtMs)))));
}

// overviewData reads the overview and the last hour of sync requests (null
// when the server records none).
let chartSeconds = 3600;
async function overviewData() {
  return Promise.all([api('overview'), api(`timeseries?seconds=${chartSeconds}`).catch(e => { if (e.status === 404) return null; throw e; })]);
}

async function overview(g) {
  const [o, ts] = await overviewData();
  if (stale(g)) return;
  setClustered(o.cluster);
  crumbs(link('/', 'overview'));
  const cards = h('div', { class: 'cards', id: 'overview-cards' }, overviewCards(o));
  const chartBox = h('div', { id: 'chart' }, chart(ts));
  const cps = h('div', { id: 'checkpoints' }, checkpointsTable(o));
  const secs = h('div', { id: 'sections' }, sectionViews(o.sections));
  let parts;
  page.replaceChildren(
    h('h1', {}, 'Overview ', h('span', { class: 'muted', id: 'updated' }, `updated ${new Date().toLocaleTimeString()}, refreshing every ${REFRESH_MS / 1000} s`)),
    cards,
    h('h2', {}, 'Sync requests over the last ', h('select', { id: 'chart-window', onchange: async (ev) => {
      chartSeconds = Number(ev.target.value);
      try { const ts = await api(`timeseries?seconds=${chartSeconds}`); if (!stale(g)) chartBox.replaceChildren(chart(ts)); } catch (e) { handle(e); }
    } }, [[300, '5 minutes'], [900, '15 minutes'], [3600, 'hour']].map(([v, l]) => h('option', { value: v, selected: v === chartSeconds }, l)))),
    chartBox,
    h('h2', {}, 'Partitions'),
    parts = pager('partitions', ['Partition', { label: 'Max seq', num: 1 }, { label: 'Horizon', num: 1 }, { label: 'Clients', num: 1 }, 'Actor', 'Last activity', 'Log epoch'],
      (after) => api(`partitions?limit=25&after=${enc(after)}`),
      (p) => h('tr', {}, td(link(`/p/${enc(p.partition)}`, p.partition, { class: 'partition-link' })), td(fmtNum(p.maxSeq), 1), td(fmtNum(p.horizon), 1),
        td(fmtNum(p.clients), 1), td(actorTag(p)),
        td(h('span', { title: ago(p.lastActivityMs) }, fmtTime(p.lastActivityMs))), td(h('code', {}, p.logEpoch))),
      (p) => p.partition),
    h('h2', {}, 'Checkpoints'),
    cps,
    h('h2', {}, 'Sections'),
    secs,
    h('h2', {}, 'Maintenance'),
    h('button', { type: 'button', onclick: () => action('maintenance', 'Run one maintenance pass now?') }, 'Run one maintenance pass'),
  );
  // The counters, the chart, the partitions page shown, the checkpoints and
  // the sections refresh in place.
  live.start(g, async () => {
    const [o, ts] = await overviewData();
    await parts.reload();
    if (stale(g)) return;
    cards.replaceChildren(...overviewCards(o));
    chartBox.replaceChildren(chart(ts));
    cps.replaceChildren(checkpointsTable(o));
    secs.replaceChildren(...sectionViews(o.sections));
    $('#updated').textContent = `updated ${new Date().toLocaleTimeString()}, refreshing every ${REFRESH_MS / 1000} s`;
  });
}

// ---- the request chart (inline SVG) ----------------------------------
const SVG = 'http://www.w3.org/2000/svg';
function svgEl(tag, attrs = {}, ...kids) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) el.setAttribute(k, v);
  for (const kid of kids.flat(Infinity)) if (kid !== undefined && kid !== null) el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  return el;
}
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 2.5, 5, 10].map(m => m * p).find(m => m >= v);
}
// panel draws series (each {name, cls, values: number|null per point}) on
// one y scale; a null value breaks the line.
function panel(id, title, unit, times, series) {
  const W = 760, H = 160, L = 56, R = 10, T = 24, B = 22;
  const max = niceMax(Math.max(0, ...series.flatMap(x => x.values.filter(v => v !== null))));
  const n = times.length;
  const x = (i) => L + (n > 1 ? i * (W - L - R) / (n - 1) : 0);
  const y = (v) => T + (H - T - B) * (1 - v / max);
  const grid = [0, 0.5, 1].map(f => [svgEl('line', { x1: L, x2: W - R, y1: y(max * f), y2: y(max * f), class: 'grid' }),
    svgEl('text', { x: L - 6, y: y(max * f) + 4, 'text-anchor': 'end', class: 'axis' }, `${(max * f).toLocaleString(undefined, { maximumFractionDigits: 2 })}`)]);
  const fmtT = (ms) => new Date(ms).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  const xlabels = n ? [0, Math.floor(n / 2), n - 1].map(i => svgEl('text', { x: x(i), y: H - 6, 'text-anchor': i === 0 ? 'start' : i === n - 1 ? 'end' : 'middle', class: 'axis' }, fmtT(times[i]))) : [];
  const lines = series.map(ser => {
    let d = '', pen = false, count = 0;
    ser.values.forEach((v, i) => {
      if (v === null) { pen = false; return; }
      d += `${pen ? 'L' : 'M'}${x(i).toFixed(1)},${y(v).toFixed(1)}`; pen = true; count++;
    });
    const path = svgEl('path', { d: d || 'M0,0', class: `line ${ser.cls}`, 'data-points': count, fill: 'none' }, svgEl('title', {}, ser.name));
    // Dots mark the points of a sparse series (a lone point draws no line).
    const dots = ser.dots ? ser.values.map((v, i) => v === null ? null : svgEl('circle', { cx: x(i).toFixed(1), cy: y(v).toFixed(1), r: 2, class: `dot ${ser.cls}` })) : [];
    return svgEl('g', {}, path, dots);
  });
  const legend = series.map((ser, i) => svgEl('g', { transform: `translate(${L + 60 + i * 110},9)` },
    svgEl('line', { x1: 0, x2: 16, y1: 0, y2: 0, class: `line ${ser.cls}` }), svgEl('text', { x: 20, y: 4, class: 'legend' }, ser.name)));
  return svgEl('svg', { id, viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title, class: 'chart' },
    svgEl('text', { x: 4, y: 13, class: 'axis' }, unit), grid, xlabels, lines, legend);
}
// chart renders a GET /api/timeseries window: request and error rate, p50
// and p99 latency (estimated from per-second histograms, within the
// precision the server states).
function chart(w) {
  if (!w) return h('p', { class: 'muted' }, 'This server records no request time series.');
  const pts = w.points || [];
  const step = w.stepSeconds || 1;
  const times = pts.map(p => p.atMs);
  const rate = (n) => n / step;
  const lat = (p, k) => p.requests ? p[k] : null;
  const t = w.total || {};
  return h('div', { class: 'chart-box', 'data-requests': t.requests || 0 },
    h('p', { class: 'muted' }, `${plural(t.requests, 'request')} (${fmtNum(t.errors)} failed) in the last ${fmtDur(w.seconds * 1000)}, `,
      `p50 ${fmtDur(t.p50Ms)}, p99 ${fmtDur(t.p99Ms)}; one point per ${plural(step, 'second')}. `,
      `Latencies are estimated from log-spaced histograms: within ±${Math.round((w.precision || 0) * 100)}% between ${fmtDur(w.minLatencyMs)} and ${fmtDur(w.maxLatencyMs)}.`),
    panel('chart-rate', 'Requests and errors per second', 'per second', times, [
      { name: 'requests/s', cls: 'requests', values: pts.map(p => rate(p.requests)) },
      { name: 'errors/s', cls: 'errors', values: pts.map(p => rate(p.errors)) }]),
    panel('chart-latency', 'Latency p50 and p99', 'ms', times, [
      { name: 'p50', cls: 'p50', dots: true, values: pts.map(p => lat(p, 'p50Ms')) },
      { name: 'p99', cls: 'p99', dots: true, values: pts.map(p => lat(p, 'p99Ms')) }]));
}

// featureCards summarizes the sections of optional features (reactions,
// blobs) as cards; their full stats stay under Sections.
function featureCards(sections) {
  const out = [];
  for (const sec of sections) {
    const st = sec.stats || {};
    if (sec.name === 'reactions' && !sec.error) {
      out.push(card('Reactions', link('/reactions', `${fmtNum(st.pending)} pending`, { id: 'reactions-link' }),
        `${fmtNum(st.dead)} dead-lettered · ${fmtNum(st.delivered)} delivered, ${fmtNum(st.retried)} retried here`));
    }
    if (sec.name === 'operations' && !sec.error) {
      const r = st.registered || {}, sum = (m) => Object.values(m || {}).reduce((a, b) => a + b, 0);
      const refused = Object.values(st.refused || {}).reduce((a, m) => a + sum(m), 0);
      out.push(card('Remote operations', `${plural((r.queries || []).length, 'query')}, ${plural((r.commands || []).length, 'command')}`,
        `${fmtNum(sum(st.executed))} executed, ${fmtNum(refused)} refused here · ${[...(r.queries || []), ...(r.commands || [])].join(', ')}`));
    }
    if (sec.name === 'blobs' && !sec.error) {
      const c = st.counters || {}, sd = st.stored;
      if (sd) out.push(card('Stored blobs', `${fmtNum(sd.present)} present, ${fmtBytes(sd.presentBytes)}`,
        `${fmtNum(sd.uploading)} uploading, ${fmtNum(sd.deleting)} being swept, ${plural(sd.references, 'row reference')}`));
      else if (st.storedError) out.push(card('Stored blobs', 'unknown', st.storedError));
      out.push(card('Blobs', `${fmtNum(c.uploads)} uploaded`, `${fmtBytes(c.bytesIn)} in, ${fmtNum(c.downloads)} downloads (${fmtBytes(c.bytesOut)}), ${fmtNum(c.swept)} orphans swept in ${plural(c.sweepPasses, 'sweep pass')}, cap ${fmtBytes(st.maxBlobBytes)}`));
    }
  }
  return out;
}

async function reactionsView(g, state) {
  crumbs(link('/', 'overview'), link('/reactions', 'reactions'));
  const first = await api(`reactions?limit=1&state=${enc(state)}`);
  if (stale(g)) return;
  const st = first.stats || {};
  const pick = h('select', { id: 'reaction-state', onchange: (ev) => { location.hash = `#/reactions/${ev.target.value}`; } },
    ['', 'pending', 'retrying', 'dead'].map(v => h('option', { value: v, selected: v === state }, v || 'all states')));
  page.replaceChildren(
    h('h1', {}, 'Durable reactions'),
    first.enabled ? h('div', { class: 'cards' },
      card('Pending', fmtNum(st.pending), 'waiting or being delivered'), card('Dead-lettered', fmtNum(st.dead), 'kept until re-driven or deleted here'),
      card('This process', `${fmtNum(st.delivered)} delivered`, `${fmtNum(st.retried)} retried, ${fmtNum(st.deadLettered)} dead-lettered`))
      : h('p', { class: 'muted' }, 'This server runs without reaction handlers: no reactions are scheduled.'),
    h('p', {}, 'Show ', pick),
    pager('reactions', [{ label: 'Id', num: 1 }, 'Partition', { label: 'Commit', num: 1 }, 'Name', 'State', { label: 'Attempts', num: 1 }, 'Next attempt', 'Last error', ''],
      (after) => api(`reactions?limit=25&state=${enc(state)}&after=${enc(after)}`),
      (r) => h('tr', { 'data-state': r.state }, td(fmtNum(r.id), 1), td(link(`/p/${enc(r.partition)}`, r.partition)),
        td(link(`/p/${enc(r.partition)}/commit/${r.commitSeq}`, fmtNum(r.commitSeq)), 1), td(r.name),
        td(h('span', { class: 'tag' + (r.state === 'dead' ? ' bad' : r.state === 'pending' ? ' ok' : '') }, r.state)),
        td(`${fmtNum(r.attempts)} of ${fmtNum(r.maxAttempts)}`, 1),
        td(r.state === 'dead' ? '—' : h('span', { title: fmtTime(r.nextAttemptAtMs) }, r.nextAttemptAtMs > Date.now() ? `in ${fmtDur(r.nextAttemptAtMs - Date.now())}` : 'due')),
        td(r.lastError ? h('code', {}, r.lastError) : '—'),
        td(r.state === 'dead' ? [
          h('button', { type: 'button', class: 'redrive', onclick: () => action(`reactions/${r.id}/redrive`, `Deliver reaction ${r.id} again (${r.maxAttempts} more attempts)?`) }, 'Re-drive'), ' ',
          h('button', { type: 'button', class: 'danger', onclick: () => action(`reactions/${r.id}/delete`, `Delete dead-lettered reaction ${r.id} for good? It is never delivered.`) }, 'Delete')] : ''))),
  );
}

function leaseCard(p, c, l) {
  if (!l) return card('Auth lease', 'none', 'leases off, or none issued yet');
  const status = l.revokedAtMs ? `revoked ${fmtTime(l.revokedAtMs)}` : l.expiresAtMs < Date.now() ? 'expired' : `expires ${fmtTime(l.expiresAtMs)}`;
  return card('Auth lease', h('code', { id: 'lease-id' }, l.leaseId), status);
}

async function action(path, question) {
  if (!confirm(question)) return;
  try {
    const res = await api(path, { method: 'POST' });
    showError('');
    alert('Done: ' + JSON.stringify(res));
    route();
  } catch (e) { handle(e); }
}

async function partitionView(g, p) {
  const d = await api(`partitions/${enc(p)}`);
  if (stale(g)) return;
  crumbs(link('/', 'overview'), link(`/p/${enc(p)}`, p));
  const scopes = h('div', { id: 'scopes' });
  page.replaceChildren(
    h('h1', {}, 'Partition ', h('code', {}, p)),
    h('div', { class: 'cards' },
      card('Max seq', fmtNum(d.maxSeq), `${plural(d.retainedCommits, 'commit')} retained`),
      card('Horizon', fmtNum(d.horizon), 'pruned through this seq'),
      card('Clients', fmtNum(d.clients)),
      d.ownedElsewhere
        ? card('Owner', h('span', { id: 'partition-owner' }, d.owner ? ['member ', memberLink(d.owner)] : 'no live member'),
          `this member forwards its requests there; last activity ${ago(d.lastActivityMs)}`)
        : card('Actor', d.live ? 'live' : 'passivated', `last activity ${ago(d.lastActivityMs)}`),
      card('Log epoch', h('code', {}, d.logEpoch), d.epochRequired ? 'epoch required (wire v1 refused)' : ''),
      card('Serve gate', d.gate.open ? 'open' : 'closed', d.gate.pending.length ? `pending: ${d.gate.pending.join(', ')}` : 'nothing pending'),
    ),
    h('h2', {}, 'Clients'),
    pager('clients', ['Client', 'Actor', { label: 'Cursor', num: 1 }, { label: 'Subscriptions', num: 1 }, 'Wire', 'Last seen'],
      (after) => api(`partitions/${enc(p)}/clients?limit=20&after=${enc(after)}`),
      (c) => h('tr', {}, td(link(`/p/${enc(p)}/c/${enc(c.clientId)}`, c.clientId, { class: 'client-link' })), td(c.actor), td(fmtNum(c.cursor), 1),
        td(fmtNum(c.subscriptionCount), 1), td(`v${c.wireVersion}`), td(fmtTime(c.lastSeenMs))),
      (c) => c.clientId),
    h('h2', {}, 'Commits'),
    commitsPager(p, ''),
    h('h2', {}, 'Scope activity ', h('span', { class: 'muted' }, '(newest 1,000 commits)')),
    scopes,
    ...sectionViews(d.sections),
    h('h2', {}, 'Actions'),
    h('button', { type: 'button', class: 'danger', onclick: () => action(`partitions/${enc(p)}/rotate-epoch`, `Rotate the log epoch of ${p}? Every client bootstraps again.`) }, 'Rotate log epoch'),
  );
  const sc = await api(`partitions/${enc(p)}/scopes`);
  scopes.replaceChildren(table(['Variable', 'Value', { label: 'Commits', num: 1 }, { label: 'Changes', num: 1 }, 'Last'],
    sc.values.map(v => h('tr', {}, td(v.var), td(v.value), td(fmtNum(v.commits), 1), td(fmtNum(v.changes), 1), td(fmtTime(v.lastMs))))));
}

function rowLinks(p, rows) {
  return rows.map((r, i) => [i ? ', ' : '', link(`/p/${enc(p)}/row/${enc(r.table)}/${enc(r.rowId)}`, `${r.table}/${r.rowId}`, { class: 'row-link' }), r.op === 'delete' ? ' (deleted)' : '']);
}

function commitsPager(p, client) {
  return pager(client ? 'client-commits' : 'commits', [{ label: 'Seq', num: 1 }, 'Time', 'Actor', 'Client', { label: 'Changes', num: 1 }, 'Rows'],
    (before) => api(`partitions/${enc(p)}/commits?limit=20&before=${enc(before)}&client=${enc(client)}`),
    (c) => h('tr', {}, td(link(`/p/${enc(p)}/commit/${c.seq}`, fmtNum(c.seq)), 1), td(fmtTime(c.createdAtMs)), td(c.actor), td(c.clientId),
      td(fmtNum(c.changes), 1), td(rowLinks(p, c.rows), c.changes > c.rows.length ? ' …' : '')));
}

async function clientView(g, p, c) {
  const d = await api(`partitions/${enc(p)}/clients/${enc(c)}`);
  if (stale(g)) return;
  crumbs(link('/', 'overview'), link(`/p/${enc(p)}`, p), link(`/p/${enc(p)}/c/${enc(c)}`, c));
  page.replaceChildren(
    h('h1', {}, 'Client ', h('code', {}, c)),
    h('div', { class: 'cards' },
      card('Actor', d.actor), card('Cursor', fmtNum(d.cursor)), card('Wire version', `v${d.wireVersion}`),
      card('Last seen', fmtTime(d.lastSeenMs), ago(d.lastSeenMs)), card('Subscriptions', fmtNum(d.subscriptionCount)),
      leaseCard(p, c, d.lease)),
    h('h2', {}, 'Subscriptions'), h('div', { id: 'subscriptions' }, view(d.subscriptions)),
    ...(d.lease ? [h('h2', {}, 'Auth lease'),
      h('p', {}, `Issued ${fmtTime(d.lease.issuedAtMs)} to actor ${d.lease.actor}. Allowed scopes while the scope resolver is down:`),
      view(d.lease.allowedScopes),
      h('button', { type: 'button', class: 'danger', id: 'revoke-lease', onclick: () => action(`partitions/${enc(p)}/clients/${enc(c)}/revoke-lease`,
        `Revoke the auth lease of ${c}? During a resolver outage its rounds then fail with sync.auth_lease_revoked; its next round with a working resolver gets a new lease. Nothing is purged.`) }, 'Revoke auth lease')] : []),
    h('h2', {}, 'Recent commits of this client'), commitsPager(p, c));
}

function valuesTable(values) {
  return table(['Column', 'Value'], Object.entries(values || {}).map(([k, v]) => h('tr', {}, td(k), td(h('code', {}, v === null ? 'NULL' : typeof v === 'object' ? JSON.stringify(v) : String(v))))));
}

async function commitView(g, p, seq) {
  const d = await api(`partitions/${enc(p)}/commits/${enc(seq)}`);
  if (stale(g)) return;
  crumbs(link('/', 'overview'), link(`/p/${enc(p)}`, p), `commit ${seq}`);
  page.replaceChildren(
    h('h1', {}, `Commit ${fmtNum(d.seq)}`),
    h('div', { class: 'cards' }, card('Time', fmtTime(d.createdAtMs)), card('Actor', d.actor), card('Client', link(`/p/${enc(p)}/c/${enc(d.clientId)}`, d.clientId)),
      card('Client commit id', d.clientCommitId), card('Changes', fmtNum(d.changes))),
    ...d.changeList.map(ch => h('div', {}, h('h2', {}, `${ch.op} `, link(`/p/${enc(p)}/row/${enc(ch.table)}/${enc(ch.rowId)}`, `${ch.table}/${ch.rowId}`, { class: 'row-link' }),
      ch.rowVersion ? h('span', { class: 'muted' }, ` → version ${fmtNum(ch.rowVersion)}`) : ''),
      ch.rowError ? h('p', { class: 'tag bad' }, ch.rowError) : ch.row ? valuesTable(ch.row) : null)));
}

async function rowView(g, p, t, id) {
  const d = await api(`partitions/${enc(p)}/rows/${enc(t)}/${enc(id)}`);
  if (stale(g)) return;
  crumbs(link('/', 'overview'), link(`/p/${enc(p)}`, p), `row ${t}/${id}`);
  page.replaceChildren(
    h('h1', { id: 'row-title' }, 'Row ', h('code', {}, `${t}/${id}`)),
    h('div', { class: 'cards' },
      card('Stored', d.exists ? 'yes' : 'no (deleted)'), card('Version', d.exists ? fmtNum(d.version) : '—'),
      card('Scopes', Object.entries(d.scopes).map(([k, v]) => `${k}=${v}`).join(', ') || '—')),
    ...(d.exists ? [h('h2', {}, 'Stored values'), valuesTable(d.values)] : []),
    ...(d.blobs && d.blobs.length ? [h('h2', {}, 'Blobs'), table(['Column', 'Blob', 'State', { label: 'Size', num: 1 }, 'Type', 'Rows of this partition referencing it'],
      d.blobs.map(b => h('tr', {}, td(b.column), td(h('code', {}, b.blobId)), td(h('span', { class: 'tag' + (b.state === 'present' ? ' ok' : ' bad') }, b.state)),
        td(fmtBytes(b.byteLength), 1), td(b.mediaType || '—'), td([rowLinks(p, b.rows), b.rows.length >= 20 ? ' …' : '']))), { id: 'row-blobs' })] : []),
    h('h2', {}, 'History ', h('span', { class: 'muted' }, d.complete ? `(whole retained log, ${plural(d.scannedCommits, 'commit')})` : `(newest ${plural(d.scannedCommits, 'commit')} looked at)`)),
    table([{ label: 'Seq', num: 1 }, 'Time', 'Actor', 'Client', 'Change', { label: 'Version', num: 1 }],
      d.history.map(c => h('tr', {}, td(link(`/p/${enc(p)}/commit/${c.seq}`, fmtNum(c.seq)), 1), td(fmtTime(c.createdAtMs)), td(c.actor), td(c.clientId),
        td(c.change.op), td(c.change.rowVersion ? fmtNum(c.change.rowVersion) : '—', 1))), { id: 'row-history' }));
}

// ---- cluster mode ------------------------------------------------------
// clustered is the overview's cluster line (null: single process;
// undefined: not known yet). The header's cluster link shows with it.
let clustered;
function parts0() { return location.hash.replace(/^#\/?/, '').split('/')[0]; }
function setClustered(c) {
  clustered = c || null;
  $('#cluster-link').hidden = !clustered;
}
// memberLink names a member (its advertise URL). Its admin listener is not
// known here, so it leads to the cluster page's row of that member.
function memberLink(id) { return link('/cluster', id, { class: 'member-link', 'data-member': id }); }
// actorTag is a partition's actor state: live or passivated on this member,
// or, in cluster mode, the member that owns it.
function actorTag(p) {
  if (p.ownedElsewhere) return h('span', { class: 'tag owner' }, p.owner ? ['owned by member ', memberLink(p.owner)] : 'no owner (no live member)');
  return p.live ? h('span', { class: 'tag ok' }, 'live') : h('span', { class: 'tag' }, 'passivated');
}
const sumOf = (o) => Object.values(o || {}).reduce((a, b) => a + Number(b || 0), 0);

async function clusterData() { return Promise.all([api('cluster'), api('cluster/partitions')]); }

function clusterBody(c, own) {
  const self = c.members.find(m => m.self)?.stats || {};
  const ids = c.members.map(m => m.id).join('\n');
  const answering = c.members.filter(m => m.reachable).length;
  const share = Object.fromEntries((own.members || []).map(m => [m.member, m.partitions]));
  const calls = [...new Set(c.members.flatMap(m => Object.keys(m.stats?.forwarded || {}).concat(Object.keys(m.stats?.served || {}))))].sort();
  const yes = (ok, yesText, noText) => h('span', { class: 'tag' + (ok ? ' ok' : ' bad') }, ok ? yesText : noText);
  const n = (v, st) => st ? fmtNum(v) : '—';
  return [
    h('div', { class: 'cards', id: 'cluster-cards' },
      card('This member', h('code', {}, c.self), c.leaving ? 'leaving: handing its partitions off' : ''),
      card('Health', h('span', { id: 'cluster-health' }, yes(c.healthy, 'healthy', 'unhealthy')),
        c.healthy ? 'its membership lease is known alive' : 'its membership lease is not known alive'),
      card('Members', fmtNum(c.members.length), `${fmtNum(answering)} answering`),
      card('Partitions owned', h('span', { id: 'owned-count' }, fmtNum(own.owned)), `of ${plural(own.partitions, 'registered partition')}` + (own.unowned ? `, ${fmtNum(own.unowned)} without an owner` : '')),
      card('Forwarded', h('span', { id: 'forwarded-count' }, fmtNum(sumOf(c.forwarded))), `${fmtNum(sumOf(c.served))} served for other members`),
      card('Retries', fmtNum(self.retries), `${fmtNum(self.unavailable)} answered unavailable`),
      card('Ownership losses', fmtNum(self.ownershipLost), `${plural(self.evictions, 'actor')} evicted`)),
    h('h2', {}, 'Members ', h('span', { class: 'muted' }, '(this member\'s view; each member\'s own counters, as it reports them)')),
    table(['Member', 'Incarnation', 'Started', 'Answering', 'Healthy', 'Its view', { label: 'Partitions', num: 1 }, { label: 'Forwarded', num: 1 }, { label: 'Served', num: 1 },
      { label: 'Retries', num: 1 }, { label: 'Unavailable', num: 1 }, { label: 'Ownership losses', num: 1 }, { label: 'Evictions', num: 1 }],
      c.members.map(m => {
        const st = m.stats;
        const view = st ? (st.members || []).map(x => x.id).join('\n') : '';
        return h('tr', { 'data-member': m.id, class: m.self ? 'self' : '' },
          td([h('code', {}, m.id), m.self ? [' ', h('span', { class: 'tag' }, 'this member')] : '', st?.leaving ? [' ', h('span', { class: 'tag bad' }, 'leaving')] : '']),
          td(h('code', {}, m.incarnation || '—')), td(h('span', { title: ago(m.startedAtMs) }, fmtTime(m.startedAtMs))),
          td([m.reachable ? yes(true, 'yes', '') : h('span', { class: 'tag bad', title: m.error || '' }, 'no'), m.error ? h('small', { class: 'muted' }, ' ' + m.error) : '']),
          td(st ? yes(st.healthy, 'healthy', 'unhealthy') : '—'),
          td(st ? (view === ids ? h('span', { class: 'tag ok' }, 'same') : h('span', { class: 'tag bad', title: view }, `differs: ${plural((st.members || []).length, 'member')}`)) : '—'),
          td(fmtNum(share[m.id] || 0), 1), td(n(sumOf(st?.forwarded), st), 1), td(n(sumOf(st?.served), st), 1),
          td(n(st?.retries, st), 1), td(n(st?.unavailable, st), 1), td(n(st?.ownershipLost, st), 1), td(n(st?.evictions, st), 1));
      }), { id: 'cluster-members' }),
    h('h2', {}, 'Calls by kind ', h('span', { class: 'muted' }, '(forwarded to an owner / served for another member)')),
    table(['Member', ...calls.map(k => ({ label: k, num: 1 }))],
      c.members.filter(m => m.stats).map(m => h('tr', { 'data-member': m.id }, td(h('code', {}, m.id)),
        calls.map(k => td(`${fmtNum(m.stats.forwarded?.[k])} / ${fmtNum(m.stats.served?.[k])}`, 1)))), { id: 'cluster-calls' }),
    h('h2', {}, 'Partitions owned by this member ', h('span', { class: 'muted' }, own.ownedTruncated ? `(the first ${fmtNum(own.ownedList.length)} by name)` : '')),
    h('p', { id: 'owned-list' }, own.ownedList.length
      ? natSortBy(own.ownedList, x => x).map((p, i) => [i ? ', ' : '', link(`/p/${enc(p)}`, p, { class: 'partition-link' })])
      : h('span', { class: 'muted' }, 'none')),
  ];
}

async function clusterView(g) {
  const [c, own] = await clusterData();
  if (stale(g)) return;
  crumbs(link('/', 'overview'), link('/cluster', 'cluster'));
  const updated = () => `updated ${new Date().toLocaleTimeString()}, refreshing every ${REFRESH_MS / 1000} s`;
  const body = h('div', { id: 'cluster' }, clusterBody(c, own));
  page.replaceChildren(h('h1', {}, 'Cluster ', h('span', { class: 'muted', id: 'updated' }, updated())), body);
  live.start(g, async () => {
    const [c, own] = await clusterData();
    if (stale(g)) return;
    body.replaceChildren(...clusterBody(c, own));
    $('#updated').textContent = updated();
  });
}

// gen counts navigations: a view whose data arrives after the operator
// moved on must not draw over the newer page.
let gen = 0;
const stale = (g) => g !== gen;

// ---- live refresh ------------------------------------------------------
// A view may register a refresh: it runs REFRESH_MS after the previous one
// ended (one request chain at a time, none while the tab is hidden) until
// the operator navigates away. A failed refresh keeps the figures but marks
// them stale, in the banner and on the page, until one succeeds again.
const REFRESH_MS = 2000;
const live = (() => {
  let timer = null, owner = -1, fn = null, okAt = Date.now(), failing = false;
  function stop() { clearTimeout(timer); timer = null; fn = null; owner = -1; failing = false; page.classList.remove('stale'); }
  function start(g, refresh) { stop(); owner = g; fn = refresh; okAt = Date.now(); timer = setTimeout(tick, REFRESH_MS); }
  async function tick() {
    const g = owner;
    if (stale(g) || !fn) return;
    if (!document.hidden) {
      try {
        await fn();
        if (stale(g)) return;
        okAt = Date.now();
        if (failing) { failing = false; page.classList.remove('stale'); showError(''); }
      } catch (e) {
        if (stale(g)) return;
        if (e.status === 401) { stop(); handle(e); return; }
        failing = true;
        page.classList.add('stale');
        showError(`Refresh failed: ${e.message}. The figures below are stale (last updated ${new Date(okAt).toLocaleTimeString()}); retrying every ${REFRESH_MS / 1000} s.`);
      }
    }
    if (!stale(g) && fn) timer = setTimeout(tick, REFRESH_MS);
  }
  return { start, stop };
})();

async function route() {
  const g = ++gen;
  live.stop();
  if (!token()) { showLogin(); return; }
  $('#login').hidden = true; $('#logout').hidden = false; showError('');
  // The cluster link shows in cluster mode only; the overview says which
  // (asked once when the first page is another).
  if (clustered === undefined && parts0() !== '') api('overview').then(o => setClustered(o.cluster)).catch(() => {});
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  try {
    if (parts[0] === 'reactions') return await reactionsView(g, parts[1] || '');
    if (parts[0] === 'cluster') return await clusterView(g);
    if (parts[0] === 'p' && parts.length >= 2) {
      const p = parts[1];
      if (parts[2] === 'c') return await clientView(g, p, parts[3]);
      if (parts[2] === 'commit') return await commitView(g, p, parts[3]);
      if (parts[2] === 'row') return await rowView(g, p, parts[3], parts.slice(4).join('/'));
      return await partitionView(g, p);
    }
    return await overview(g);
  } catch (e) {
    if (stale(g)) return;
    // Nothing of the previous view stays under the banner: it would pass
    // for this one's data.
    page.replaceChildren(h('p', { class: 'muted', id: 'load-failed' }, 'This page could not be loaded. ',
      h('button', { type: 'button', onclick: () => route() }, 'Try again')));
    crumbs(link('/', 'overview'));
    handle(e);
  }
}

// ---- live events (Server-Sent Events over fetch, so the token travels in
// a header, never in the URL) --------------------------------------------
const events = (() => {
  let ctrl = null, lastId = '', timer = null;
  const body = $('#events-body'), state = $('#events-state');
  function add(ev) {
    const tr = h('tr', { class: 'new', 'data-kind': ev.kind },
      td(new Date(ev.at).toLocaleTimeString()), td(h('span', { class: 'tag' + (/rejected|failed|refused|restarted/.test(ev.kind) ? ' bad' : '') }, ev.kind)),
      td(ev.partition ? link(`/p/${enc(ev.partition)}`, ev.partition) : ''),
      td([ev.actor ? `${ev.actor}: ` : '', ev.message || '', ev.code ? h('code', {}, ` ${ev.code}`) : '', ev.durationMs ? ` (${fmtDur(ev.durationMs)})` : '']));
    body.prepend(tr);
    while (body.children.length > 200) body.lastChild.remove();
  }
  async function run() {
    ctrl = new AbortController();
    const headers = { Authorization: 'Bearer ' + token() };
    if (lastId) headers['Last-Event-ID'] = lastId;
    try {
      const res = await fetch('api/events/stream', { headers, signal: ctrl.signal });
      if (res.status === 401) { state.textContent = 'token refused'; return; }
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      state.textContent = 'connected';
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i); buf = buf.slice(i + 2);
          let id = '', type = 'message', data = '';
          for (const line of block.split('\n')) {
            if (line.startsWith('id: ')) id = line.slice(4);
            else if (line.startsWith('event: ')) type = line.slice(7);
            else if (line.startsWith('data: ')) data += line.slice(6);
          }
          if (type === 'server-event' && data) { lastId = id || lastId; add(JSON.parse(data)); }
        }
      }
      state.textContent = 'reconnecting…';
    } catch (e) {
      if (e.name === 'AbortError') return;
      state.textContent = `disconnected (${e.message}); retrying`;
    }
    timer = setTimeout(run, 2000);
  }
  return {
    start() { if (!ctrl && token()) run(); },
    stop() { ctrl?.abort(); ctrl = null; clearTimeout(timer); state.textContent = 'not connected'; },
  };
})();

window.addEventListener('hashchange', route);
route();
events.start();
