-- What got slower or faster between two runs: per kind (kernel, cpu_op,
-- annotation) and name, base and target calls, total and median time, the
-- change of the time per sample, and a status: new, gone, slower, faster or
-- same. A sample is one profiler step of one rank (a whole trace file when it
-- has no steps), so runs that profiled different numbers of steps or ranks
-- still compare. In a trace with steps, what ran outside them (warm-up
-- before the first step, a sync after the last) is no sample: it counts in
-- calls and total time but not in the time per sample, and is shown apart
-- (base_outside_steps_us, target_outside_steps_us). Timings are noisy: slower/faster only when the change is at
-- least min_change_pct and more than noise_z standard errors of the
-- difference of the means (from the spread across steps and ranks; with one
-- sample per side only the relative threshold applies). ProfilerStep#N
-- annotations compare as one name, ProfilerStep#*. Sorted by impact: the
-- change in time per sample. `tracedb query regressions --base v1 --run v2`
-- Grain: one row per phase, kind and name.
-- param base: the run to compare against (--base)
-- param target: the run compared (--run)
-- param min_change_pct: smallest change flagged slower or faster, percent (default 10)
-- param noise_z: standard errors of the difference the change must exceed (default 3)
-- requires: int_op_step_sums, int_op_percentiles
-- order by: abs(delta_per_step_us) DESC NULLS LAST, kind, name
CREATE OR REPLACE MACRO regressions(base, target, min_change_pct := 10, noise_z := 3) AS TABLE
WITH per_sample AS (
    -- One row per sample and compared name. int_op_step_sums has that
    -- already, but for the ProfilerStep#N annotations (compare_name
    -- ProfilerStep#*, int_op_steps), which alone are summed: a GROUP BY of
    -- every row took half of this query.
    SELECT run, phase, kind, compare_name AS name, rank, file_id, step, calls, total_ns AS ns
    FROM int_op_step_sums
    WHERE (run = base OR run = target) AND compare_name <> 'ProfilerStep#*'
    UNION ALL
    SELECT
        run, phase, kind, compare_name AS name, rank, file_id, step, sum(calls) AS calls, sum(total_ns) AS ns
    FROM int_op_step_sums
    WHERE (run = base OR run = target) AND compare_name = 'ProfilerStep#*'
    GROUP BY ALL
),
-- Rows outside the steps of a trace file that has steps: not a sample.
stepped_files AS (
    SELECT DISTINCT file_id
    FROM int_op_step_sums
    WHERE (run = base OR run = target) AND step IS NOT NULL
),
marked AS (
    SELECT p.*, p.step IS NULL AND f.file_id IS NOT NULL AS is_outside_steps
    FROM per_sample p
    LEFT JOIN stepped_files f ON f.file_id = p.file_id
),
samples AS (
    SELECT run, phase, count(*) AS sample_count
    FROM (SELECT DISTINCT run, phase, rank, file_id, step FROM marked WHERE NOT is_outside_steps)
    GROUP BY run, phase
),
per_name AS (
    SELECT
        run, phase, kind, name, sum(calls) AS calls, sum(ns) AS total_ns,
        coalesce(sum(ns) FILTER (WHERE NOT is_outside_steps), 0) AS sampled_ns,
        sum(CAST(ns AS DOUBLE) * ns) FILTER (WHERE NOT is_outside_steps) AS sum_sq,
        coalesce(sum(ns) FILTER (WHERE is_outside_steps), 0) AS outside_ns
    FROM marked
    GROUP BY run, phase, kind, name
),
medians AS (
    SELECT run, phase, kind, name, p50_ns
    FROM int_op_percentiles
    WHERE is_compare_name AND (run = base OR run = target)
),
sides AS (
    SELECT
        n.run, n.phase, n.kind, n.name, n.calls, n.total_ns, n.outside_ns, m.p50_ns, s.sample_count,
        n.sampled_ns / s.sample_count AS mean_ns,
        CASE WHEN s.sample_count > 1 THEN greatest(0.0,
            (coalesce(n.sum_sq, 0) - CAST(n.sampled_ns AS DOUBLE) * n.sampled_ns / s.sample_count)
            / (s.sample_count - 1)) END AS var_ns2
    FROM per_name n
    JOIN medians m ON m.run = n.run AND m.phase = n.phase AND m.kind = n.kind AND m.name = n.name
    JOIN samples s ON s.run = n.run AND s.phase = n.phase
),
paired AS (
    SELECT
        coalesce(t.phase, b.phase) AS phase,
        coalesce(t.kind, b.kind) AS kind,
        coalesce(t.name, b.name) AS name,
        coalesce(b.calls, 0) AS base_calls,
        coalesce(t.calls, 0) AS target_calls,
        coalesce(b.total_ns, 0) AS base_total_ns,
        coalesce(t.total_ns, 0) AS target_total_ns,
        coalesce(b.outside_ns, 0) AS base_outside_ns,
        coalesce(t.outside_ns, 0) AS target_outside_ns,
        b.p50_ns AS base_p50_ns,
        t.p50_ns AS target_p50_ns,
        coalesce(b.mean_ns, 0) AS base_mean_ns,
        coalesce(t.mean_ns, 0) AS target_mean_ns,
        sqrt(coalesce(b.var_ns2 / b.sample_count, 0) + coalesce(t.var_ns2 / t.sample_count, 0)) AS se_ns
    FROM (SELECT * FROM sides WHERE run = base) b
    FULL OUTER JOIN (SELECT * FROM sides WHERE run = target) t
      ON t.phase = b.phase AND t.kind = b.kind AND t.name = b.name
),
judged AS (
    SELECT
        *,
        CASE
            WHEN base_calls = 0 THEN 'new'
            WHEN target_calls = 0 THEN 'gone'
            WHEN base_mean_ns > 0 AND abs(target_mean_ns - base_mean_ns) >= min_change_pct / 100.0 * base_mean_ns
                 AND abs(target_mean_ns - base_mean_ns) > noise_z * se_ns
                 THEN CASE WHEN target_mean_ns > base_mean_ns THEN 'slower' ELSE 'faster' END
            ELSE 'same'
        END AS status
    FROM paired
)
SELECT
    phase,
    -- kernel, cpu_op or annotation.
    kind,
    -- Kernel, op or annotation name (ProfilerStep#* for the steps).
    name,
    -- new (only in target), gone (only in base), slower, faster (beyond noise) or same.
    status,
    -- Calls in the base run, all ranks.
    CAST(base_calls AS BIGINT) AS base_calls,
    -- Calls in the target run, all ranks.
    CAST(target_calls AS BIGINT) AS target_calls,
    -- Summed time in the base run, microseconds.
    base_total_ns / 1e3 AS base_total_us,
    -- Summed time in the target run, microseconds.
    target_total_ns / 1e3 AS target_total_us,
    -- Of base_total_us, the time outside the profiler steps of traces that have steps (in no sample), microseconds.
    base_outside_ns / 1e3 AS base_outside_steps_us,
    -- Of target_total_us, the time outside the profiler steps of traces that have steps, microseconds.
    target_outside_ns / 1e3 AS target_outside_steps_us,
    -- Median duration per call in the base run, microseconds.
    base_p50_ns / 1e3 AS base_p50_us,
    -- Median duration per call in the target run, microseconds.
    target_p50_ns / 1e3 AS target_p50_us,
    -- Mean time per sample (rank and step; outside-step time left out) in the base run, microseconds.
    base_mean_ns / 1e3 AS base_per_step_us,
    -- Mean time per sample in the target run, microseconds.
    target_mean_ns / 1e3 AS target_per_step_us,
    -- Target less base time per sample, microseconds: the impact on step time.
    (target_mean_ns - base_mean_ns) / 1e3 AS delta_per_step_us,
    -- Change of the time per sample, percent of base; NULL when new.
    CASE WHEN base_mean_ns > 0 THEN 100.0 * (target_mean_ns - base_mean_ns) / base_mean_ns END AS change_pct,
    -- Standard error of the difference (spread across steps and ranks), microseconds.
    se_ns / 1e3 AS noise_us
FROM judged;
