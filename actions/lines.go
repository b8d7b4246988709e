package actions

import (
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"
)

// keyLines maps every key path of a TOML document to the file line it is
// written on: "name", "execute[0]", "execute[0].args.format", "inputs[1].type".
// firstLine is the file line of the document's first line. The document
// must already have decoded without error.
func keyLines(doc []byte, firstLine int) map[string]int {
	lines := map[string]int{}
	arrays := map[string]int{} // array-of-tables path → entries so far
	p := &unstable.Parser{}
	p.Reset(doc)
	lineOf := func(n *unstable.Node) int {
		return p.Shape(n.Raw).Start.Line + firstLine - 1
	}
	// resolve turns dotted keys into a path, entering the last entry of
	// each array of tables on the way.
	resolve := func(prefix string, it unstable.Iterator) (string, *unstable.Node) {
		cur := prefix
		var last *unstable.Node
		for it.Next() {
			n := it.Node()
			last = n
			cur = join(cur, string(n.Data))
			if k, ok := arrays[cur]; ok && k > 0 {
				cur += "[" + strconv.Itoa(k-1) + "]"
			}
		}
		return cur, last
	}
	prefix := ""
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table:
			path, last := resolve("", e.Key())
			if last != nil {
				setLine(lines, path, lineOf(last))
			}
			prefix = path
		case unstable.ArrayTable:
			var keys []*unstable.Node
			it := e.Key()
			for it.Next() {
				keys = append(keys, it.Node())
			}
			if len(keys) == 0 {
				continue
			}
			parent := ""
			for _, k := range keys[:len(keys)-1] {
				parent = join(parent, string(k.Data))
				if n, ok := arrays[parent]; ok && n > 0 {
					parent += "[" + strconv.Itoa(n-1) + "]"
				}
			}
			base := join(parent, string(keys[len(keys)-1].Data))
			idx := arrays[base]
			arrays[base] = idx + 1
			l := lineOf(keys[len(keys)-1])
			setLine(lines, base, l)
			prefix = base + "[" + strconv.Itoa(idx) + "]"
			lines[prefix] = l
		case unstable.KeyValue:
			path, last := resolve(prefix, e.Key())
			if last == nil {
				continue
			}
			l := lineOf(last)
			setLine(lines, path, l)
			valueLines(lines, path, e.Value(), l)
		}
	}
	return lines
}

// valueLines records the keys inside inline tables (and arrays of them) at
// the line of their key.
func valueLines(lines map[string]int, path string, v *unstable.Node, l int) {
	switch v.Kind {
	case unstable.InlineTable:
		it := v.Children()
		for it.Next() {
			kv := it.Node()
			if kv.Kind != unstable.KeyValue {
				continue
			}
			var parts []string
			kit := kv.Key()
			for kit.Next() {
				parts = append(parts, string(kit.Node().Data))
			}
			p := path + "." + strings.Join(parts, ".")
			setLine(lines, p, l)
			valueLines(lines, p, kv.Value(), l)
		}
	case unstable.Array:
		it := v.Children()
		for i := 0; it.Next(); i++ {
			valueLines(lines, path+"["+strconv.Itoa(i)+"]", it.Node(), l)
		}
	}
}

func setLine(lines map[string]int, path string, l int) {
	if _, ok := lines[path]; !ok {
		lines[path] = l
	}
}
