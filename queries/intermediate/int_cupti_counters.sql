-- CUPTI profiler counters (HTA's cupti_counter_analysis input): each
-- cuda_profiler_range event is one kernel run under the CUPTI profiler, its
-- args the counters measured (sm__..., smsp__sass_thread_inst_executed_...),
-- summed per kernel name and counter: per rank (grain 'rank') and over all
-- ranks (grain 'all', rank NULL).
-- Grain: one row per grain, run, rank, phase, kernel name and counter.
CREATE OR REPLACE VIEW int_cupti_counters AS
WITH ranges AS (
    SELECT run, rank, phase, file_id, event_id, name, dur_ns, args
    FROM events
    WHERE ph = 'X' AND lower(cat) = 'cuda_profiler_range'
),
counters AS (
    SELECT r.run, r.rank, r.phase, r.name, r.dur_ns, c.key AS counter, TRY_CAST(c.value AS DOUBLE) AS value
    FROM ranges r, json_each(r.args) c
)
SELECT
    -- rank (one rank) or all (summed over ranks).
    CASE WHEN grouping(rank) = 1 THEN 'all' ELSE 'rank' END AS grain,
    run, rank, phase,
    -- Kernel name as the profiler range writes it (__missing__ where CUPTI gave none).
    name,
    -- Counter name (CUPTI metric).
    counter,
    -- Profiled kernel runs.
    count(*) AS kernel_count,
    -- Sum of the counter over the runs, in the counter's unit.
    sum(value) AS total_value,
    -- Mean per run, in the counter's unit.
    avg(value) AS mean_value,
    -- Range time of the runs (the profiler replays each kernel: not its normal duration), microseconds.
    sum(dur_ns) / 1e3 AS range_us
FROM counters
WHERE value IS NOT NULL
GROUP BY GROUPING SETS ((run, rank, phase, name, counter), (run, phase, name, counter));
