// Checks merged updates with the real yjs package: reads a JSON file
// [{name, merged (base64), state}] and verifies that a fresh Y.Doc applying
// each merged update is complete and in exactly the expected state. Exits
// 1 listing every mismatch.
import { readFileSync } from 'node:fs'
import * as Y from 'yjs'
import { docState, complete } from './state.mjs'

const cases = JSON.parse(readFileSync(process.argv[2], 'utf8'))
let failed = 0
for (const c of cases) {
  const doc = new Y.Doc()
  try {
    Y.applyUpdate(doc, Buffer.from(c.merged, 'base64'))
  } catch (e) {
    console.log(`${c.name}: yjs refused the merged update: ${e.message}`)
    failed++
    continue
  }
  const got = JSON.stringify(docState(doc))
  const want = JSON.stringify(c.state)
  if (!complete(doc)) {
    console.log(`${c.name}: the merged update leaves pending structs or deletes`)
    failed++
  } else if (got !== want) {
    console.log(`${c.name}: state differs\n got: ${got}\nwant: ${want}`)
    failed++
  }
}
console.log(`checked ${cases.length} merged updates, ${failed} failed`)
process.exit(failed ? 1 : 0)
