-- GPU memory copies and sets on the device.
-- Grain: one row per copy or memset.
CREATE OR REPLACE VIEW stg_memcpy AS
SELECT
    run,
    rank,
    phase,
    file_id,
    event_id,
    -- Copy kind as the trace names it (Memcpy HtoD, Memset (Device), ...).
    name,
    -- memcpy or memset.
    CASE WHEN lower(cat) = 'gpu_memset' THEN 'memset' ELSE 'memcpy' END AS kind,
    -- Start, nanoseconds.
    ts_ns,
    -- Duration, nanoseconds.
    dur_ns,
    -- End (ts_ns + dur_ns), nanoseconds.
    ts_ns + dur_ns AS end_ns,
    -- GPU index.
    coalesce(device, TRY_CAST(pid AS BIGINT)) AS device,
    -- Stream.
    coalesce(stream, TRY_CAST(tid AS BIGINT)) AS stream,
    -- Bytes copied or set.
    bytes,
    -- Bandwidth the trace reports, GB/s.
    memory_bandwidth_gbps,
    -- Correlation id linking to the runtime call.
    correlation,
    -- External id of the CPU op.
    external_id
FROM events
WHERE ph = 'X' AND lower(cat) IN ('gpu_memcpy', 'gpu_memset') AND dur_ns IS NOT NULL;
