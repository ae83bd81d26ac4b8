"""Everything that sends requests: collect, preflight, teacher-forced scoring,
throughput, server info. Imports wire, judge, store and errors."""
