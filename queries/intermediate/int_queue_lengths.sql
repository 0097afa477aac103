-- The queue of each GPU stream as a step function: the number of operations
-- (kernels, copies, memsets) launched on the CPU but not yet finished on the
-- GPU. It rises by one at the start of an operation's launch call and falls
-- by one at the operation's end; changes at the same instant are summed.
-- Operations whose launch call the trace does not hold are left out (as in
-- HTA). Unlike HTA, which lowers the queue when an operation starts, an
-- operation counts until it ends (launched but not finished).
-- Grain: one row per run, rank, phase, file, device, stream and instant at which the queue length changes.
-- requires: int_stream_ops
CREATE OR REPLACE VIEW int_queue_lengths AS
WITH deltas AS (
    SELECT run, rank, phase, file_id, device, stream, launch_ts_ns AS ts_ns, 1 AS delta
    FROM int_stream_ops WHERE launch_ts_ns IS NOT NULL
    UNION ALL
    SELECT run, rank, phase, file_id, device, stream, end_ns AS ts_ns, -1 AS delta
    FROM int_stream_ops WHERE launch_ts_ns IS NOT NULL
),
points AS (
    SELECT run, rank, phase, file_id, device, stream, ts_ns, sum(delta) AS delta
    FROM deltas
    GROUP BY run, rank, phase, file_id, device, stream, ts_ns
)
SELECT
    run, rank, phase, file_id,
    -- GPU index.
    device,
    -- Stream.
    stream,
    -- Instant of the change, nanoseconds.
    ts_ns,
    -- Next change on the stream, nanoseconds; NULL after the last.
    lead(ts_ns) OVER (PARTITION BY run, rank, phase, file_id, device, stream ORDER BY ts_ns) AS next_ts_ns,
    -- Operations launched and not finished from ts_ns to next_ts_ns.
    CAST(sum(delta) OVER (PARTITION BY run, rank, phase, file_id, device, stream ORDER BY ts_ns ROWS UNBOUNDED PRECEDING) AS BIGINT) AS queue_length,
    -- First change of any stream in the trace file (the time series' origin), nanoseconds.
    min(ts_ns) OVER (PARTITION BY run, rank, phase, file_id) AS origin_ns
FROM points;
