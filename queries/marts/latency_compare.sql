-- Latency of every run against a base run, as a configuration sweep is
-- read: each run's p50/p95/p99 beside the base's, their ratios, and whether
-- the difference is beyond noise. Noise is judged from the samples: a
-- two-sided Mann-Whitney rank test of the run's spans against the base's
-- (normal approximation with the tie correction); beyond noise when its
-- p-value is under alpha. Runs compare within one phase, kind and clock: a
-- CUDA-event latency is never set against a wall-clock one.
-- `tracedb query latency --span forward --base bs1` (query routes --base here).
-- Grain: one row per run other than the base, phase, kind and clock that the base also has.
-- param base: the run every other run is compared to (--base)
-- param span: span name or SQL LIKE pattern (default 'ProfilerStep#%': the profiler steps)
-- param alpha: p-value under which a difference is beyond noise (default 0.001)
-- requires: int_latency_spans
-- order by: phase, kind, clock, run
-- default kind: timer, annotation, cpu_op, kernel
CREATE OR REPLACE MACRO latency_compare(base, span := 'ProfilerStep#%', alpha := 0.001) AS TABLE
WITH spans AS (
    SELECT run, phase, kind, clock, dur_ns FROM int_latency_spans WHERE name LIKE span
),
pairs AS (
    SELECT DISTINCT t.run, t.phase, t.kind, t.clock FROM spans t
    SEMI JOIN (SELECT DISTINCT phase, kind, clock FROM spans WHERE run = base) b
        ON b.phase = t.phase AND b.kind = t.kind AND b.clock = t.clock
    WHERE t.run <> base
),
pooled AS (
    -- The run's spans and the base's, per pair; the test ranks them together.
    SELECT p.run, p.phase, p.kind, p.clock, s.run = base AS is_base, s.dur_ns
    FROM pairs p
    JOIN spans s ON s.phase = p.phase AND s.kind = p.kind AND s.clock = p.clock AND (s.run = p.run OR s.run = base)
),
ranked AS (
    -- Mid-rank of each span in the pooled sample (ties share their mean rank).
    SELECT run, phase, kind, clock, is_base, dur_ns,
        rank() OVER (PARTITION BY run, phase, kind, clock ORDER BY dur_ns)
            + (count(*) OVER (PARTITION BY run, phase, kind, clock, dur_ns) - 1) / 2.0 AS mid_rank
    FROM pooled
),
ties AS (
    SELECT run, phase, kind, clock, sum(t * t * t - t) AS tie_term
    FROM (SELECT run, phase, kind, clock, count(*)::DOUBLE AS t FROM pooled GROUP BY run, phase, kind, clock, dur_ns)
    GROUP BY run, phase, kind, clock
),
sides AS (
    SELECT run, phase, kind, clock,
        count(*) FILTER (is_base)::DOUBLE AS n_base,
        count(*) FILTER (NOT is_base)::DOUBLE AS n_run,
        sum(mid_rank) FILTER (NOT is_base) AS rank_sum,
        quantile_cont(dur_ns, 0.5) FILTER (is_base) AS base_p50_ns,
        quantile_cont(dur_ns, 0.95) FILTER (is_base) AS base_p95_ns,
        quantile_cont(dur_ns, 0.99) FILTER (is_base) AS base_p99_ns,
        quantile_cont(dur_ns, 0.5) FILTER (NOT is_base) AS p50_ns,
        quantile_cont(dur_ns, 0.95) FILTER (NOT is_base) AS p95_ns,
        quantile_cont(dur_ns, 0.99) FILTER (NOT is_base) AS p99_ns
    FROM ranked
    GROUP BY run, phase, kind, clock
),
tested AS (
    SELECT s.run, s.phase, s.kind, s.clock, n_base, n_run,
        base_p50_ns, base_p95_ns, base_p99_ns, p50_ns, p95_ns, p99_ns,
        -- The run's U less its mean under no difference, over its standard deviation (tie-corrected).
        (rank_sum - n_run * (n_run + 1) / 2 - n_run * n_base / 2)
            / nullif(sqrt(n_run * n_base / 12
                          * ((n_run + n_base + 1) - t.tie_term / ((n_run + n_base) * (n_run + n_base - 1)))), 0) AS z
    FROM sides s JOIN ties t ON t.run = s.run AND t.phase = s.phase AND t.kind = s.kind AND t.clock = s.clock
),
p_values AS (
    -- Two-sided p = erfc(|z| / sqrt 2); erfc by Abramowitz & Stegun 7.1.26 (error under 1.5e-7).
    SELECT run, phase, kind, clock, n_base, n_run,
        base_p50_ns, base_p95_ns, base_p99_ns, p50_ns, p95_ns, p99_ns, z,
        (0.254829592 * e - 0.284496736 * e ^ 2 + 1.421413741 * e ^ 3 - 1.453152027 * e ^ 4 + 1.061405429 * e ^ 5)
            * exp(-(z * z) / 2) AS p_value
    FROM (
        SELECT run, phase, kind, clock, n_base, n_run,
            base_p50_ns, base_p95_ns, base_p99_ns, p50_ns, p95_ns, p99_ns, z,
            1 / (1 + 0.3275911 * abs(z) / sqrt(2)) AS e
        FROM tested
    )
)
SELECT
    run,
    phase,
    -- timer, annotation, cpu_op or kernel.
    kind,
    -- trace, cuda_event or wall: both sides measured with it.
    clock,
    -- The name or pattern asked for.
    span AS span_pattern,
    -- The base run.
    base AS base_run,
    -- Spans of the base run.
    n_base::BIGINT AS base_calls,
    -- Spans of this run.
    n_run::BIGINT AS calls,
    -- Base median, microseconds.
    base_p50_ns / 1e3 AS base_p50_us,
    -- Median, microseconds.
    p50_ns / 1e3 AS p50_us,
    -- p50_us / base_p50_us.
    p50_ns / nullif(base_p50_ns, 0) AS p50_ratio,
    -- Base 95th percentile, microseconds.
    base_p95_ns / 1e3 AS base_p95_us,
    -- 95th percentile, microseconds.
    p95_ns / 1e3 AS p95_us,
    -- p95_us / base_p95_us.
    p95_ns / nullif(base_p95_ns, 0) AS p95_ratio,
    -- Base 99th percentile, microseconds.
    base_p99_ns / 1e3 AS base_p99_us,
    -- 99th percentile, microseconds.
    p99_ns / 1e3 AS p99_us,
    -- p99_us / base_p99_us.
    p99_ns / nullif(base_p99_ns, 0) AS p99_ratio,
    -- Mann-Whitney z of this run against the base (positive: this run's spans rank longer).
    z AS rank_test_z,
    -- Two-sided p-value of the rank test (NULL when every span has the same duration).
    p_value,
    -- True when p_value < alpha: the difference is beyond the noise of the samples.
    coalesce(p_value < alpha, false) AS is_beyond_noise,
    -- slower or faster (beyond noise), else same.
    CASE WHEN p_value < alpha AND z > 0 THEN 'slower' WHEN p_value < alpha THEN 'faster' ELSE 'same' END AS change
FROM p_values;
