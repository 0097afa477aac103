-- Top kernels, CPU ops or annotations by total time over all ranks of a run
-- and phase: which kernels dominate. `tracedb query hotspots --run v2`
-- (kernels when the run has any, else CPU ops; --kind picks).
-- Grain: one row per run, phase, kind, name.
-- requires: int_hotspots
-- order by: total_us DESC, name
-- default kind: kernel, cpu_op, annotation
CREATE OR REPLACE VIEW hotspots AS
SELECT
    run, phase,
    -- kernel, cpu_op or annotation.
    kind,
    name, rank_count, calls, total_us, self_us, mean_us, p50_us, p95_us, max_us,
    -- Share of the total time of this kind in the run and phase, percent.
    pct_of_total
FROM int_hotspots
WHERE NOT is_per_rank;
