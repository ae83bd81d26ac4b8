"""The flows a command runs, each one library call: the A/B (collect, compare, gate
the candidates), comparing collected runs, an endpoint's determinism. Imports every
layer below (fetch, gate, present, judge, wire, store); the CLI calls it."""
