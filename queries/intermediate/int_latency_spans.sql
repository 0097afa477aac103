-- Every span the latency views measure, with the clock that timed it: the
-- kernels, CPU ops and annotations of the profiler (clock 'trace') and the
-- passes timed by tracedb.torch.ForwardTimer (kind 'timer', clock
-- cuda_event or wall). Different clocks are different quantities: the
-- latency views keep them apart.
-- Grain: one row per span.
-- requires: int_timed_ops, stg_timer_spans
CREATE OR REPLACE VIEW int_latency_spans AS
SELECT
    run, rank, phase,
    -- timer, annotation, cpu_op or kernel.
    kind,
    -- trace (the profiler's timestamps), cuda_event or wall.
    'trace' AS clock,
    -- Span name.
    name,
    -- Duration, nanoseconds.
    dur_ns
FROM int_timed_ops
UNION ALL
SELECT run, rank, phase, 'timer' AS kind, clock, name, dur_ns FROM stg_timer_spans;
