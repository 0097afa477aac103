-- Runs of k consecutive kernels on one stream (copies and memsets left out),
-- counted at every starting kernel, so that occurrences overlap (a b c d
-- holds a b c and b c d), grouped by the names in order: per rank (grain
-- 'rank') and over all ranks (grain 'all', rank NULL).
-- Grain: one row per grain, run, rank, phase, device, stream and sequence of k kernel names.
-- param k: kernels in a sequence (default 3)
-- requires: int_stream_ops
CREATE OR REPLACE MACRO int_kernel_sequences(k := 3) AS TABLE
WITH kernels AS (
    SELECT run, rank, phase, file_id, device, stream, ts_ns, event_id, name, dur_ns, end_ns
    FROM int_stream_ops
    WHERE kind = 'kernel'
),
windows AS (
    SELECT
        run, rank, phase, device, stream,
        list(name) OVER w AS names,
        sum(dur_ns) OVER w AS kernel_ns,
        max(end_ns) OVER w - ts_ns AS span_ns
    FROM kernels
    WINDOW w AS (PARTITION BY run, rank, phase, file_id, device, stream ORDER BY ts_ns, event_id
                 ROWS BETWEEN CURRENT ROW AND CAST(k AS BIGINT) - 1 FOLLOWING)
)
SELECT
    -- rank (one rank) or all (summed over ranks).
    CASE WHEN grouping(rank) = 1 THEN 'all' ELSE 'rank' END AS grain,
    run, rank, phase,
    -- GPU index.
    device,
    -- Stream.
    stream,
    -- Kernel names in launch order, joined by ' -> '.
    array_to_string(names, ' -> ') AS sequence,
    -- Kernel names in order.
    names AS kernel_names,
    -- Ranks where the sequence runs.
    count(DISTINCT rank) AS rank_count,
    -- Times the sequence runs (overlapping occurrences each count).
    count(*) AS occurrences,
    -- Kernel time of all occurrences, microseconds.
    sum(kernel_ns) / 1e3 AS total_us,
    -- Kernel time of one occurrence on average, microseconds.
    avg(kernel_ns) / 1e3 AS mean_us,
    -- First start to last end of all occurrences (kernel time plus the gaps a fusion would remove), microseconds.
    sum(span_ns) / 1e3 AS span_us
FROM windows
WHERE len(names) = k
GROUP BY GROUPING SETS ((run, rank, phase, device, stream, names), (run, phase, device, stream, names));
