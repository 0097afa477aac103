-- How busy each GPU stream and device is: busy time (exact union of kernels,
-- copies and sets), the span from first start to last end, the idle time and
-- gaps in between, and the busy share. scope `stream`: one stream; scope
-- `device`: all streams of the device together (stream NULL). Spans and
-- unions are per trace file, then summed.
-- `tracedb query gpu_utilization --run v2`
-- Grain: one row per run, rank, phase, device, scope and stream.
-- requires: int_gpu_busy_sums
-- order by: run, phase, rank, device, scope, stream
CREATE OR REPLACE VIEW gpu_utilization AS
SELECT
    run,
    rank,
    phase,
    -- GPU index.
    device,
    -- stream (one stream) or device (all its streams together).
    scope,
    -- Stream; NULL for scope device.
    stream,
    -- Kernels, copies and sets.
    sum(activity_count) AS activity_count,
    -- Time at least one kernel, copy or set runs (union), microseconds.
    sum(busy_ns) / 1e3 AS busy_us,
    -- First start to last end, microseconds.
    sum(span_ns) / 1e3 AS span_us,
    -- Span less busy time, microseconds.
    sum(span_ns - busy_ns) / 1e3 AS idle_us,
    -- Busy share of the span, percent.
    CASE WHEN sum(span_ns) > 0 THEN 100.0 * sum(busy_ns) / sum(span_ns) END AS busy_pct,
    -- Idle gaps between busy intervals.
    sum(gap_count) AS gap_count,
    -- Longest idle gap, microseconds.
    max(max_gap_ns) / 1e3 AS max_gap_us
FROM int_gpu_busy_sums
GROUP BY run, rank, phase, device, scope, stream;
