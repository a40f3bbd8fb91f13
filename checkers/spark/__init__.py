"""The Spark plumbing that feeds the checkers' judgments: the session and its class archive, the
history as tables (and its fast path), the per-key pass of the append workload, the pipeline and
its registry, the report's timeline data and the runs index."""
