package storage

import (
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
)

func isIntegerColumn(t *schema.Table, i int) bool { return t.Columns[i].Type == ssp2.TypeInteger }
