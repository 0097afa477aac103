-- Why each GPU stream sits idle, per rank, as HTA's get_idle_time_breakdown
-- splits it. Each gap between an operation (kernel, copy or memset) and the
-- one before it on its stream is one of:
--   host_wait    the operation's launch call started after the previous
--                operation ended: the GPU waited for the CPU to enqueue work;
--   kernel_wait  otherwise, a gap under 30 ns (HTA's default
--                consecutive_kernel_delay): the overhead of back-to-back kernels;
--   other        otherwise (waiting on another stream, an event, a sync).
-- Unlike HTA, a gap of zero or less (operations that touch or overlap on the
-- stream) is no idle time and is not counted; an operation whose launch call
-- the trace does not hold is never host_wait (as in HTA). Gaps are taken
-- within one trace file. `tracedb query idle_breakdown --rank 0`
-- Grain: one row per run, rank, phase, device, stream and idle category.
-- requires: int_stream_ops
-- order by: run, phase, rank, device, stream, category
CREATE OR REPLACE VIEW idle_breakdown_by_rank AS
WITH gaps AS (
    SELECT
        run, rank, phase, device, stream,
        ts_ns - prev_end_ns AS gap_ns,
        CASE
            WHEN launch_ts_ns > prev_end_ns THEN 'host_wait'
            WHEN ts_ns - prev_end_ns < 30 THEN 'kernel_wait'
            ELSE 'other'
        END AS category
    FROM int_stream_ops
    WHERE prev_end_ns IS NOT NULL AND ts_ns > prev_end_ns
)
SELECT
    run, rank, phase,
    -- GPU index.
    device,
    -- Stream.
    stream,
    -- host_wait, kernel_wait or other (see above).
    category,
    -- Idle gaps of this category.
    count(*) AS gap_count,
    -- Idle time of this category, microseconds.
    sum(gap_ns) / 1e3 AS idle_us,
    -- Share of the stream's idle time, percent.
    100.0 * sum(gap_ns) / sum(sum(gap_ns)) OVER (PARTITION BY run, rank, phase, device, stream) AS idle_pct,
    -- Longest gap of this category, microseconds.
    max(gap_ns) / 1e3 AS max_gap_us
FROM gaps
GROUP BY run, rank, phase, device, stream, category;
