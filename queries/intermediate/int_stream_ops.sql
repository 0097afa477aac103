-- Every kernel, copy and memset on a GPU stream with the CPU runtime call
-- that enqueued it (same trace file and correlation id; the earliest call,
-- GPU-side cuda_sync events left out), its position in its stream and the
-- end of the operation before it on that stream. idle_breakdown,
-- queue_length and kernel_sequences read it. run, rank and phase lead its
-- partitions and join keys (file_id alone decides them): a query's filter
-- on them then reaches the scans through the windows, and --run v2 reads
-- v2's files, not the warehouse's.
-- Grain: one row per kernel, copy or memset.
-- requires: stg_kernels, stg_memcpy, stg_runtime_calls
CREATE OR REPLACE VIEW int_stream_ops AS
WITH ops AS (
    SELECT run, rank, phase, file_id, event_id, 'kernel' AS kind, name, device, stream,
           ts_ns, dur_ns, end_ns, correlation, NULL::BIGINT AS bytes
    FROM stg_kernels
    UNION ALL
    SELECT run, rank, phase, file_id, event_id, kind, name, device, stream,
           ts_ns, dur_ns, end_ns, correlation, bytes
    FROM stg_memcpy
),
calls AS (
    SELECT run, rank, phase, file_id, correlation, event_id, name, ts_ns, end_ns, pid
    FROM stg_runtime_calls
    WHERE correlation IS NOT NULL AND lower(cat) <> 'cuda_sync'
    QUALIFY row_number() OVER (PARTITION BY run, rank, phase, file_id, correlation ORDER BY ts_ns, event_id) = 1
)
SELECT
    o.run, o.rank, o.phase, o.file_id, o.event_id,
    -- kernel, memcpy or memset.
    o.kind,
    -- Kernel or copy name.
    o.name,
    -- GPU index.
    o.device,
    -- Stream.
    o.stream,
    -- Start on the GPU, nanoseconds.
    o.ts_ns,
    -- Duration, nanoseconds.
    o.dur_ns,
    -- End on the GPU, nanoseconds.
    o.end_ns,
    -- Bytes copied or set (copies and memsets; NULL for kernels).
    o.bytes,
    -- Event id of the runtime call that enqueued it; NULL when the trace holds none.
    c.event_id AS launch_event_id,
    -- Runtime call that enqueued it (cudaLaunchKernel, cudaMemcpyAsync, ...); NULL when the trace holds none.
    c.name AS launch_name,
    -- Process id of the thread that made that call.
    c.pid AS launch_pid,
    -- Start of that call on the CPU, nanoseconds.
    c.ts_ns AS launch_ts_ns,
    -- End of that call on the CPU, nanoseconds.
    c.end_ns AS launch_end_ns,
    -- Position in its stream within the trace file, from 1 in start order.
    row_number() OVER w AS position,
    -- End of the previous operation on the same stream, nanoseconds; NULL for the first.
    lag(o.end_ns) OVER w AS prev_end_ns
FROM ops o
LEFT JOIN calls c
    ON c.run = o.run AND c.rank = o.rank AND c.phase = o.phase AND c.file_id = o.file_id
   AND c.correlation = o.correlation
WINDOW w AS (PARTITION BY o.run, o.rank, o.phase, o.file_id, o.device, o.stream ORDER BY o.ts_ns, o.event_id);
