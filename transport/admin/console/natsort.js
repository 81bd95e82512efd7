// Natural order for ids shown by the console: runs of digits compare by
// their value, so "c2" comes before "c10"; everything else compares by
// code point, as the store orders ids. Equal values with different zero
// padding ("c02", "c2") fall back to plain code point order, so the order
// is total and stable.
const RUNS = /(\d+)|(\D+)/g;

function runs(s) { return String(s).match(RUNS) || []; }

// natCompare orders a and b naturally: negative, zero or positive.
export function natCompare(a, b) {
  const x = runs(a), y = runs(b);
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const p = x[i], q = y[i];
    const pd = p.charCodeAt(0) >= 48 && p.charCodeAt(0) <= 57;
    const qd = q.charCodeAt(0) >= 48 && q.charCodeAt(0) <= 57;
    if (pd && qd) {
      // Compare the values without Number (ids may hold long digit runs):
      // strip leading zeros, then the longer run is the larger.
      const ps = p.replace(/^0+/, ''), qs = q.replace(/^0+/, '');
      if (ps.length !== qs.length) return ps.length - qs.length;
      if (ps !== qs) return ps < qs ? -1 : 1;
      continue;
    }
    if (p !== q) return p < q ? -1 : 1;
  }
  if (x.length !== y.length) return x.length - y.length;
  a = String(a); b = String(b);
  return a < b ? -1 : a > b ? 1 : 0;
}

// natSortBy returns a copy of items in natural order of key(item).
export function natSortBy(items, key) {
  return [...items].sort((a, b) => natCompare(key(a), key(b)));
}
