// Node.js test of natsort.js (run by natsort_test.go; kept out of console/, which is served): each case sorts a
// shuffled list and must give the expected order.
import { natCompare, natSortBy } from '../console/natsort.js';

const cases = [
  { name: 'digit runs by value', want: ['c1', 'c2', 'c10', 'c11', 'c20', 'c100'] },
  { name: 'text before and after numbers', want: ['a', 'a1', 'a2', 'a10', 'b', 'b2'] },
  { name: 'several runs', want: ['v1.2.9', 'v1.10.0', 'v2.0.1', 'v10.0.0'] },
  { name: 'zero padding: same value, then code point', want: ['c001', 'c01', 'c1', 'c2', 'c010'] },
  { name: 'long digit runs', want: ['n9', 'n123456789012345678901234567890', 'n123456789012345678901234567891'] },
  { name: 'pure numbers', want: ['0', '1', '9', '10', '99', '100'] },
  { name: 'uuids stay in code point order', want: ['0a3f', '1b2c', 'f00d'] },
  { name: 'case is code point order', want: ['B1', 'a1', 'b1'] },
  { name: 'empty first', want: ['', '0', 'a'] },
];
let failed = 0;
for (const c of cases) {
  const shuffled = [...c.want].reverse();
  const got = natSortBy(shuffled.map(id => ({ id })), x => x.id).map(x => x.id);
  if (JSON.stringify(got) !== JSON.stringify(c.want)) {
    console.log(`FAIL ${c.name}: got ${JSON.stringify(got)}, want ${JSON.stringify(c.want)}`);
    failed++;
  } else {
    console.log(`ok   ${c.name}`);
  }
  for (let i = 0; i < c.want.length; i++) {
    if (natCompare(c.want[i], c.want[i]) !== 0) { console.log(`FAIL ${c.name}: ${c.want[i]} not equal to itself`); failed++; }
    for (let j = i + 1; j < c.want.length; j++) {
      if (!(natCompare(c.want[i], c.want[j]) < 0 && natCompare(c.want[j], c.want[i]) > 0)) {
        console.log(`FAIL ${c.name}: ${c.want[i]} vs ${c.want[j]} not antisymmetric`); failed++;
      }
    }
  }
}
if (failed) { console.log(`${failed} failures`); process.exit(1); }
