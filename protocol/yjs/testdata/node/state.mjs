// The document state the vectors compare: the three root types of a
// vector document, rendered as canonical JSON (object keys sorted, binary
// as base64), so two documents in the same state render identically
// whatever order their updates were integrated in.
import * as Y from 'yjs'

const canon = (v) => {
  if (v instanceof Uint8Array) return { $bytes: Buffer.from(v).toString('base64') }
  if (v instanceof Y.AbstractType) return canon(v.toJSON())
  if (Array.isArray(v)) return v.map(canon)
  if (v !== null && typeof v === 'object') {
    const out = {}
    for (const k of Object.keys(v).sort()) out[k] = canon(v[k])
    return out
  }
  return v === undefined ? null : v
}

export const docState = (doc) => canon({
  text: doc.getText('text').toDelta(),
  map: doc.getMap('map').toJSON(),
  array: doc.getArray('array').toJSON(),
})

// complete reports whether the document integrated everything it was given
// (nothing waits for missing structs or deletes).
export const complete = (doc) => doc.store.pendingStructs === null && doc.store.pendingDs === null
