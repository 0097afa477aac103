-- Latency of any span by name or SQL LIKE pattern over all ranks: calls,
-- mean and percentiles, as inference profiling reports them (forward passes,
-- steps). `tracedb query latency --run v2 --span 'ProfilerStep#%'`; spans are
-- ForwardTimer passes, user annotations, CPU ops or kernels (--kind; in that
-- order); per rank: latency_by_rank; against a base run: latency_compare.
-- Grain: one row per run, phase, kind and clock of the matching spans.
-- param span: span name or SQL LIKE pattern (default 'ProfilerStep#%': the profiler steps)
-- requires: int_latency
-- order by: run, phase, kind, clock
-- default kind: timer, annotation, cpu_op, kernel
CREATE OR REPLACE MACRO latency(span := 'ProfilerStep#%') AS TABLE
SELECT run, phase, kind, clock, span_pattern, name_count, rank_count, calls, avg_us, p50_us, p95_us, p99_us, min_us, max_us
FROM int_latency(span := span)
WHERE NOT is_per_rank;
