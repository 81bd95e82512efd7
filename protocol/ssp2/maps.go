package ssp2

// listMap decodes map<str,list(str)> enforcing unique, UTF-16-ascending keys.
func (d *dec) listMap(r *rd, what string) map[string][]string {
	var m map[string][]string
	d.mapEntries(r, what, func(n int) { m = make(map[string][]string, n) }, func(k string) {
		c := r.count(what+" values", 4)
		vals := make([]string, 0, c)
		for j := 0; j < c && r.err == nil; j++ {
			vals = append(vals, d.intern(r.strBytes(what+" value")))
		}
		m[k] = vals
	})
	return m
}

// strMap decodes map<str,str> enforcing unique, UTF-16-ascending keys.
func (d *dec) strMap(r *rd, what string) map[string]string {
	var m map[string]string
	d.mapEntries(r, what, func(n int) { m = make(map[string]string, n) }, func(k string) {
		m[k] = d.intern(r.strBytes(what + " value"))
	})
	return m
}

// mapEntries reads a map's count and keys, rejecting a key that is not
// strictly above the previous one in UTF-16 order, and lets value read
// each key's value. alloc runs once the count is known to be valid.
func (d *dec) mapEntries(r *rd, what string, alloc func(n int), value func(k string)) {
	n := r.count(what, 8)
	if r.err != nil {
		return
	}
	alloc(n)
	prev := ""
	for i := 0; i < n && r.err == nil; i++ {
		start := r.off
		k := d.intern(r.strBytes(what + " key"))
		if r.err != nil {
			return
		}
		if i > 0 && CompareUTF16(prev, k) >= 0 {
			r.off = start
			r.fail("%s: key %q not strictly ascending (UTF-16 order) after %q", what, k, prev)
			return
		}
		prev = k
		value(k)
	}
}

// appendListMap encodes map<str,list(str)> with keys in UTF-16 order. It
// allocates only for maps of more than 8 keys.
func appendListMap(b []byte, m map[string][]string) ([]byte, error) {
	var arr [8]string
	keys := arr[:0]
	for k := range m {
		keys = append(keys, k)
	}
	sortKeysUTF16(keys)
	b = appendU32(b, uint32(len(keys)))
	for _, k := range keys {
		if err := checkStr("map key", k); err != nil {
			return b, err
		}
		b = appendStr(b, k)
		vs := m[k]
		b = appendU32(b, uint32(len(vs)))
		for _, v := range vs {
			if err := checkStr("map value", v); err != nil {
				return b, err
			}
			b = appendStr(b, v)
		}
	}
	return b, nil
}

// appendStrMap encodes map<str,str> with keys in UTF-16 order. It allocates
// only for maps of more than 8 keys.
func appendStrMap(b []byte, m map[string]string) ([]byte, error) {
	var arr [8]string
	keys := arr[:0]
	for k := range m {
		keys = append(keys, k)
	}
	sortKeysUTF16(keys)
	b = appendU32(b, uint32(len(keys)))
	for _, k := range keys {
		v := m[k]
		if err := checkStr("map key", k); err != nil {
			return b, err
		}
		if err := checkStr("map value", v); err != nil {
			return b, err
		}
		b = appendStr(b, k)
		b = appendStr(b, v)
	}
	return b, nil
}
