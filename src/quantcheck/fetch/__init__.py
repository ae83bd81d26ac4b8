"""Everything that sends requests: collect, preflight and its template check,
teacher-forced scoring, throughput, server info, the judge's questions, and every client
a flow holds. What it may import: the layer map in docs/development.md."""
