package params

import (
	"flag"

	"gopkg.in/yaml.v3"
)

// A few settings are each point's own, not the deployment's: the grace
// period of its epochs, the RDA size a path starts with, and how it reads
// flow tags and VXLAN. The API form of the parameters does not carry them,
// so a peer neither checks nor pushes them, and setting them does not make
// a probe's parameters its own rather than the collector's.

// localFlags are the flags of the local settings.
var localFlags = map[string]bool{"grace": true, "rda-buckets": true, "flow-tag": true, "vxlan-port": true}

// localKeys are the YAML keys of the local settings, by section.
var localKeys = map[string]map[string]bool{
	"epoch":    {"grace": true},
	"rda":      {"buckets": true},
	"identity": {"flow_tag": true, "vxlan_port": true},
}

// WithLocal returns p with the local settings taken from l.
func (p Params) WithLocal(l Params) Params {
	p.Epoch.Grace = l.Epoch.Grace
	p.RDA.Buckets = l.RDA.Buckets
	p.Identity.FlowTag, p.Identity.VXLANPort = l.Identity.FlowTag, l.Identity.VXLANPort
	return p
}

// SetsShared says whether any of the named flags sets a shared parameter:
// a flag of BindFlags other than those of the local settings (-grace,
// -rda-buckets, -flow-tag, -vxlan-port).
func SetsShared(names []string) bool {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	p := Default()
	p.BindFlags(fs)
	for _, n := range names {
		if fs.Lookup(n) != nil && !localFlags[n] {
			return true
		}
	}
	return false
}

// SharedInYAML says whether n, the YAML value of a params key, sets a
// shared parameter, not only local settings. An empty or null value sets
// none.
func SharedInYAML(n *yaml.Node) bool {
	n = resolve(n)
	switch {
	case n == nil || n.Kind == 0 || n.Tag == "!!null":
		return false
	case n.Kind != yaml.MappingNode:
		return true // not parameters: let decoding say what is wrong
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		section, v := n.Content[i].Value, resolve(n.Content[i+1])
		local := localKeys[section]
		switch {
		case v.Tag == "!!null":
			continue
		case local == nil || v.Kind != yaml.MappingNode:
			return true
		}
		for j := 0; j+1 < len(v.Content); j += 2 {
			if !local[v.Content[j].Value] {
				return true
			}
		}
	}
	return false
}

// resolve follows a YAML alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}
