-- Top kernels, CPU ops or annotations by total time, per rank: what
-- `tracedb query hotspots --rank N` shows.
-- Grain: one row per run, rank, phase, kind, name.
-- requires: int_hotspots
-- order by: total_us DESC, name
-- default kind: kernel, cpu_op, annotation
CREATE OR REPLACE VIEW hotspots_by_rank AS
SELECT
    run, rank, phase,
    -- kernel, cpu_op or annotation.
    kind,
    name, calls, total_us, self_us, mean_us, p50_us, p95_us, max_us,
    -- Share of the total time of this kind in the run, rank and phase, percent.
    pct_of_total
FROM int_hotspots
WHERE is_per_rank;
