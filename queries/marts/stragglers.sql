-- Which rank holds each step back: per profiler step, the slowest rank, its
-- step time, the median over ranks and the excess of the slowest over the
-- median. `tracedb query stragglers --run v2`
-- Grain: one row per run, phase, step.
-- requires: int_step_sums
-- order by: excess_us DESC, run, phase, step
CREATE OR REPLACE VIEW stragglers AS
WITH steps AS (
    SELECT run, rank, phase, step, sum(dur_ns) / 1e3 AS dur_us
    FROM int_step_sums
    GROUP BY run, rank, phase, step
),
per_step AS (
    SELECT
        run, phase, step,
        count(*) AS rank_count,
        arg_max(rank, (dur_us, -rank)) AS slowest_rank,
        max(dur_us) AS slowest_us,
        quantile_cont(dur_us, 0.5) AS median_us,
        arg_min(rank, (dur_us, rank)) AS fastest_rank,
        min(dur_us) AS fastest_us
    FROM steps
    GROUP BY run, phase, step
)
SELECT
    run,
    phase,
    -- Step number N of ProfilerStep#N.
    step,
    -- Ranks that ran the step.
    rank_count,
    -- Rank with the longest step time (lowest rank on ties).
    slowest_rank,
    -- Its step time, microseconds.
    slowest_us,
    -- Median step time over ranks (linear interpolation), microseconds.
    median_us,
    -- Rank with the shortest step time (lowest rank on ties).
    fastest_rank,
    -- Its step time, microseconds.
    fastest_us,
    -- Slowest less median, microseconds.
    slowest_us - median_us AS excess_us,
    -- Excess as a share of the median, percent.
    CASE WHEN median_us > 0 THEN 100.0 * (slowest_us - median_us) / median_us END AS excess_pct
FROM per_step;
