// Generates vectors.json: random concurrent edit histories of Y.Text,
// Y.Map and Y.Array documents (inserts, deletes, formatting, embeds,
// nested types, binary values) on several replicas that sync now and then,
// every update they emitted plus some full-state snapshots (which hold
// garbage-collected structs), and the state of a document that applied
// them all. Deterministic: run `node gen.mjs > ../vectors.json`.
import * as Y from 'yjs'
import { docState, complete } from './state.mjs'

let seed = 0x5eed1e55
const rand = () => {
  // mulberry32
  seed = (seed + 0x6d2b79f5) | 0
  let t = seed
  t = Math.imul(t ^ (t >>> 15), t | 1)
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}
const int = (n) => Math.floor(rand() * n)
const pick = (a) => a[int(a.length)]
const words = ['a', 'b', 'héllo', 'wörld', '😀', 'x y', '日本', '']
const word = () => pick(words) + String.fromCharCode(97 + int(26))

const edit = (doc) => {
  const text = doc.getText('text')
  const map = doc.getMap('map')
  const array = doc.getArray('array')
  switch (int(12)) {
    case 0: case 1: case 2:
      text.insert(int(text.length + 1), word())
      break
    case 3:
      if (text.length > 0) { const i = int(text.length); text.delete(i, 1 + int(Math.min(4, text.length - i))) }
      break
    case 4:
      if (text.length > 0) { const i = int(text.length); text.format(i, 1 + int(text.length - i), { bold: rand() < 0.5 ? true : null }) }
      else text.insert(0, word(), { italic: true })
      break
    case 5:
      text.insertEmbed(int(text.length + 1), { image: word() })
      break
    case 6:
      map.set(pick(['k1', 'k2', 'k3', 'k4']), pick([int(1000), word(), rand(), true, null, [1, 'two'], { n: int(9) }]))
      break
    case 7:
      if (rand() < 0.5) map.delete(pick(['k1', 'k2', 'k3', 'k4']))
      else map.set('bin', new Uint8Array([int(256), int(256)]))
      break
    case 8: {
      const sub = new Y.Map()
      map.set(pick(['nested1', 'nested2']), sub)
      sub.set('v', int(100))
      break
    }
    case 9:
      array.insert(int(array.length + 1), Array.from({ length: 1 + int(3) }, () => pick([int(100), word(), -1.5, false])))
      break
    case 10:
      if (array.length > 0) { const i = int(array.length); array.delete(i, 1 + int(Math.min(3, array.length - i))) }
      break
    case 11: {
      const t = new Y.Text()
      array.insert(int(array.length + 1), [t])
      t.insert(0, word())
      break
    }
  }
}

const vectors = []
for (let v = 0; v < 40; v++) {
  const replicas = Array.from({ length: 2 + int(3) }, (_, i) => {
    const d = new Y.Doc()
    d.clientID = 1 + int(0x7fffffff)
    return d
  })
  const updates = []
  for (const d of replicas) {
    d.on('update', (u, origin) => { if (origin !== 'sync') updates.push(u) })
  }
  const rounds = 5 + int(25)
  for (let r = 0; r < rounds; r++) {
    const d = pick(replicas)
    d.transact(() => { for (let k = 1 + int(3); k > 0; k--) edit(d) })
    if (rand() < 0.3) {
      // one replica catches up with another: later edits depend on earlier ones
      const [a, b] = [pick(replicas), pick(replicas)]
      Y.applyUpdate(a, Y.encodeStateAsUpdate(b, Y.encodeStateVector(a)), 'sync')
    }
    if (rand() < 0.15) updates.push(Y.encodeStateAsUpdate(pick(replicas)))
  }
  const all = new Y.Doc()
  for (const u of updates) Y.applyUpdate(all, u)
  if (!complete(all)) throw new Error(`vector ${v}: updates do not make a complete document`)
  vectors.push({
    name: `history-${v}`,
    updates: updates.map((u) => Buffer.from(u).toString('base64')),
    state: docState(all),
  })
}
process.stdout.write(JSON.stringify({ generator: 'gen.mjs', yjs: '13.6.27', vectors }, null, 1) + '\n')
