-- Memory allocated and reserved per device over time, from the caching
-- allocator's [memory] events (traces recorded with profile_memory=True), in
-- buckets of `resolution_us` from the trace file's first such event: the
-- highest and the last value in each bucket. Buckets with no event are
-- absent (the value holds from the bucket before). The peak and what ran at
-- it: memory_peak. `tracedb query memory_timeline --run v2 --rank 0 --resolution-us 10000`
-- Grain: one row per run, rank, phase, device type, device and time bucket.
-- param resolution_us: bucket width, microseconds (default 1000)
-- requires: int_memory_events
-- order by: run, phase, rank, device_type, device, bucket_start_us
CREATE OR REPLACE MACRO memory_timeline(resolution_us := 1000) AS TABLE
WITH bucketed AS (
    SELECT *,
           CAST(round(resolution_us * 1000) AS BIGINT) AS width_ns,
           min(ts_ns) OVER (PARTITION BY file_id) AS origin_ns
    FROM int_memory_events
)
SELECT
    run, rank, phase,
    -- cpu or cuda.
    device_type,
    -- Device Id (-1 for the CPU).
    device,
    -- Bucket start from the trace file's first [memory] event, microseconds.
    (ts_ns - origin_ns) // width_ns * width_ns / 1e3 AS bucket_start_us,
    -- Bucket start on the trace's clock, nanoseconds.
    min(origin_ns) + (ts_ns - origin_ns) // width_ns * width_ns AS bucket_ts_ns,
    -- Allocations and frees in the bucket.
    count(*) AS event_count,
    -- Highest allocated bytes in the bucket.
    max(allocated_bytes) AS max_allocated_bytes,
    -- Allocated bytes after the bucket's last event.
    arg_max(allocated_bytes, (ts_ns, event_id)) AS allocated_bytes,
    -- Highest reserved bytes in the bucket.
    max(reserved_bytes) AS max_reserved_bytes,
    -- Reserved bytes after the bucket's last event.
    arg_max(reserved_bytes, (ts_ns, event_id)) AS reserved_bytes
FROM bucketed
GROUP BY run, rank, phase, file_id, device_type, device, (ts_ns - origin_ns) // width_ns, width_ns;
