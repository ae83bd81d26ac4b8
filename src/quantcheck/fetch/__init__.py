"""Everything that sends requests: collect, preflight and its template check,
teacher-forced scoring, throughput, server info, judge_question (asking the judge). Imports
wire, judge, store and errors."""
