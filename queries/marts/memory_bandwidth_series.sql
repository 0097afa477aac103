-- Memory bandwidth in use over time, per GPU and direction, in buckets of
-- `resolution_us` from the trace file's first copy: the bytes each copy or
-- memset moves inside the bucket (its bytes spread evenly over its
-- duration; a 0 ns one counts whole where it starts) over the bucket width.
-- This is the bucket's time average of HTA's get_memory_bw_time_series (the
-- summed bandwidth of the copies running at each instant). Buckets with no
-- traffic are absent. `tracedb query memory_bandwidth_series --run v2 --resolution-us 100`
-- Grain: one row per run, rank, phase, device, kind and time bucket.
-- param resolution_us: bucket width, microseconds (default 1000)
-- requires: int_memory_ops
-- order by: run, phase, rank, device, kind, bucket_start_us
CREATE OR REPLACE MACRO memory_bandwidth_series(resolution_us := 1000) AS TABLE
WITH ops AS (
    SELECT run, rank, phase, file_id, device, kind, ts_ns, end_ns, dur_ns, bytes, origin_ns,
           CAST(round(resolution_us * 1000) AS BIGINT) AS width_ns
    FROM int_memory_ops
    WHERE bytes IS NOT NULL
),
pieces AS (
    SELECT run, rank, phase, file_id, device, kind, origin_ns, width_ns, b.bucket,
           CASE WHEN dur_ns = 0 THEN bytes
                ELSE bytes * (least(end_ns, origin_ns + (b.bucket + 1) * width_ns)
                              - greatest(ts_ns, origin_ns + b.bucket * width_ns)) / dur_ns END AS bytes
    FROM ops,
         LATERAL (SELECT unnest(generate_series((ts_ns - origin_ns) // width_ns,
                                                (greatest(end_ns - 1, ts_ns) - origin_ns) // width_ns)) AS bucket) b
)
SELECT
    run, rank, phase,
    -- GPU index.
    device,
    -- HtoD, DtoH, DtoD, PtoP or memset.
    kind,
    -- Bucket start from the trace file's first copy, microseconds.
    bucket * width_ns / 1e3 AS bucket_start_us,
    -- Bucket start on the trace's clock, nanoseconds.
    min(origin_ns) + bucket * width_ns AS bucket_ts_ns,
    -- Bytes moved inside the bucket.
    sum(bytes) AS bytes,
    -- Mean bandwidth in use over the bucket, GB/s.
    sum(bytes) / min(width_ns) AS gbps
FROM pieces
GROUP BY run, rank, phase, file_id, device, kind, bucket, width_ns;
