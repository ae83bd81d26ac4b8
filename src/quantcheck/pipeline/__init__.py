"""The flows a command runs, each one library call: the A/B (collect, compare, gate
the candidates), collecting, comparing collected runs, the judge's judge_question, preflight
and probe, an endpoint's determinism, the starter kit of `init`. Imports every
layer below (fetch, gate, present, judge, wire, store); the CLI calls it."""
