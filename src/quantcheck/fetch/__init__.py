"""Everything that sends requests: collect, preflight and its template check,
teacher-forced scoring, throughput, server info, grading (asking the judge). Imports
wire, judge, store and errors."""
