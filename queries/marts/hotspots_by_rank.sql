-- Top kernels, CPU ops or annotations by total time, per rank: what
-- `tracedb query hotspots --rank N` shows.
-- Grain: one row per run, rank, phase, kind, name.
-- requires: int_op_durations
-- order by: total_us DESC, name
-- default kind: kernel, cpu_op, annotation
CREATE OR REPLACE VIEW hotspots_by_rank AS
SELECT
    run,
    rank,
    phase,
    -- kernel, cpu_op or annotation.
    kind,
    -- Kernel / op / annotation name.
    name,
    -- Number of executions.
    count(*) AS calls,
    -- Summed duration, microseconds.
    sum(dur_ns) / 1e3 AS total_us,
    -- Summed self time (CPU ops: less child ops on the same thread), microseconds.
    sum(self_ns) / 1e3 AS self_us,
    -- Mean duration, microseconds.
    avg(dur_ns) / 1e3 AS mean_us,
    -- Median duration (linear interpolation), microseconds.
    quantile_cont(dur_ns, 0.5) / 1e3 AS p50_us,
    -- 95th percentile duration (linear interpolation), microseconds.
    quantile_cont(dur_ns, 0.95) / 1e3 AS p95_us,
    -- Longest duration, microseconds.
    max(dur_ns) / 1e3 AS max_us,
    -- Share of the total time of this kind in the run, rank and phase, percent.
    100.0 * sum(dur_ns) / sum(sum(dur_ns)) OVER (PARTITION BY run, rank, phase, kind) AS pct_of_total
FROM int_op_durations
GROUP BY run, rank, phase, kind, name;
