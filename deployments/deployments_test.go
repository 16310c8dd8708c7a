// Package deployments holds example configurations and service units; its
// test keeps the examples valid as the code changes.
package deployments

import (
	"testing"

	"github.com/owl-latency/owl/internal/collector"
	"github.com/owl-latency/owl/internal/probe"
)

func TestExampleConfigs(t *testing.T) {
	c := collector.DefaultConfig()
	if err := collector.LoadFile("collector.yaml", &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	p := probe.DefaultConfig()
	if err := probe.LoadFile("probe.yaml", &p); err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := p.Clock.Validate(); err != nil {
		t.Errorf("example clock: %v", err)
	}
	if err := c.Params.Compatible(p.Params); err != nil {
		t.Errorf("example probe would be rejected by the example collector: %v", err)
	}
}
