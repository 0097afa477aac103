-- Every communication op (int_comm_ops) with its duration in microseconds
-- and its bandwidth: algbw = bytes / time; busbw = algbw x the nccl-tests
-- factor: allreduce 2(n-1)/n; allgather, reducescatter, alltoall (n-1)/n of
-- the total size; broadcast, reduce, send/recv 1. What collectives shows and
-- comm_latency aggregates.
-- Grain: one row per communication op.
-- requires: int_comm_ops
CREATE OR REPLACE VIEW int_collectives AS
WITH ops AS (
    SELECT
        *,
        CASE
            WHEN collective = 'allreduce' THEN 2.0 * (group_size - 1) / group_size
            WHEN collective IN ('allgather', 'reducescatter', 'alltoall') THEN 1.0 * (group_size - 1) / group_size
            WHEN collective IN ('broadcast', 'reduce', 'sendrecv', 'send', 'recv') THEN 1.0
        END AS busbw_factor
    FROM int_comm_ops
)
SELECT
    run, rank, phase, file_id, event_id,
    -- Profiler step (kernels: of the launch); NULL outside steps.
    step,
    -- Collective, lower case without separators (allreduce, allgather, reducescatter, alltoall, broadcast, reduce, sendrecv, dispatch, combine, notify, ...).
    collective,
    -- Communication library (nccl, deepep, gloo, c10d, ...).
    library,
    -- kernel, annotation (gloo:*) or cpu_op (c10d::*).
    source,
    -- Kernel or op name.
    name,
    -- Start, nanoseconds.
    ts_ns,
    -- Duration, microseconds.
    dur_ns / 1e3 AS dur_us,
    -- Message size (the total, as nccl-tests counts it), bytes; NULL when unknown.
    msg_bytes,
    -- Elements in the message; NULL when unknown.
    msg_nelems,
    -- Element type as the trace writes it.
    dtype,
    -- Ranks in the process group; NULL when unknown.
    group_size,
    -- Algorithm bandwidth: msg_bytes / duration, GB/s (1e9 bytes/s).
    CASE WHEN dur_ns > 0 THEN msg_bytes / dur_ns END AS algbw_gbps,
    -- Bus bandwidth: algbw x the nccl-tests factor of the collective, GB/s; NULL when size, group size or factor is unknown.
    CASE WHEN dur_ns > 0 THEN msg_bytes / dur_ns * busbw_factor END AS busbw_gbps,
    -- Process group name.
    pg_name,
    -- Process group description.
    pg_desc,
    -- GPU index (NULL on the CPU).
    device,
    -- Stream (NULL on the CPU).
    stream
FROM ops;
