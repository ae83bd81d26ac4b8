"""The flows a command runs, each one library call: the A/B (collect, compare, gate
the candidates), collecting, comparing collected runs, the judge's second opinion, preflight
and probe, an endpoint's determinism, the starter kit of `init`. What it may import: the
layer map in docs/development.md."""
