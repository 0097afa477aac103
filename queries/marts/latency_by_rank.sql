-- latency per rank: calls, mean and percentiles of the spans matching a name
-- or SQL LIKE pattern (`tracedb query latency --rank N --span 'forward%'`).
-- Grain: one row per run, rank, phase, kind and clock of the matching spans.
-- param span: span name or SQL LIKE pattern (default 'ProfilerStep#%': the profiler steps)
-- requires: int_latency
-- order by: run, phase, rank, kind, clock
-- default kind: timer, annotation, cpu_op, kernel
CREATE OR REPLACE MACRO latency_by_rank(span := 'ProfilerStep#%') AS TABLE
SELECT run, rank, phase, kind, clock, span_pattern, name_count, calls, avg_us, p50_us, p95_us, p99_us, min_us, max_us
FROM int_latency(span := span)
WHERE is_per_rank;
