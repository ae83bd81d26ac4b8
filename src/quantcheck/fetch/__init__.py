"""Everything that sends requests: collect, preflight and its template check,
teacher-forced scoring, throughput, server info, question to the judge (asking the judge). Imports
wire, judge, store and errors."""
