-- Launch queue depth of each GPU stream over time, in buckets of
-- `resolution_us` from the trace's first launch: the time-weighted mean and
-- the maximum number of operations launched and not yet finished
-- (int_queue_lengths) while the bucket lasts. Buckets with no queue (before
-- a stream's first launch, after its last end) are absent.
-- `tracedb query queue_length --run v2 --rank 0 --resolution-us 100`
-- Grain: one row per run, rank, phase, device, stream and time bucket.
-- param resolution_us: bucket width, microseconds (default 1000)
-- requires: int_queue_lengths
-- order by: run, phase, rank, device, stream, bucket_start_us
CREATE OR REPLACE MACRO queue_length(resolution_us := 1000) AS TABLE
WITH segments AS (
    SELECT run, rank, phase, file_id, device, stream, queue_length, ts_ns, next_ts_ns, origin_ns,
           CAST(round(resolution_us * 1000) AS BIGINT) AS width_ns
    FROM int_queue_lengths
    WHERE next_ts_ns IS NOT NULL
),
pieces AS (
    SELECT run, rank, phase, file_id, device, stream, queue_length, width_ns, origin_ns, b.bucket,
           least(next_ts_ns, origin_ns + (b.bucket + 1) * width_ns)
             - greatest(ts_ns, origin_ns + b.bucket * width_ns) AS dur_ns
    FROM segments,
         LATERAL (SELECT unnest(generate_series((ts_ns - origin_ns) // width_ns,
                                                (next_ts_ns - 1 - origin_ns) // width_ns)) AS bucket) b
)
SELECT
    run, rank, phase,
    -- GPU index.
    device,
    -- Stream.
    stream,
    -- Bucket start from the trace's first launch, microseconds.
    bucket * width_ns / 1e3 AS bucket_start_us,
    -- Bucket start on the trace's clock, nanoseconds.
    min(origin_ns) + bucket * width_ns AS bucket_ts_ns,
    -- Time-weighted mean queue length over the part of the bucket the stream's queue covers, operations.
    sum(queue_length * dur_ns) / sum(dur_ns) AS mean_queue_length,
    -- Deepest queue within the bucket, operations.
    max(queue_length) AS max_queue_length
FROM pieces
WHERE dur_ns > 0
GROUP BY run, rank, phase, file_id, device, stream, bucket, width_ns;
