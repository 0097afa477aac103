-- Every communication op (collective kernels on GPU traces; gloo/c10d ops on
-- CPU-only ones; see comm_patterns) with its message size, group size,
-- duration and bandwidth. algbw = bytes / time; busbw = algbw x the
-- nccl-tests factor: allreduce 2(n-1)/n; allgather, reducescatter, alltoall
-- (n-1)/n of the total size; broadcast, reduce, send/recv 1.
-- `tracedb query collectives --run v2`
-- Grain: one row per communication op.
-- requires: int_collectives
-- order by: run, rank, phase, ts_ns
CREATE OR REPLACE VIEW collectives AS
SELECT
    run, rank, phase, file_id, event_id, step, collective, library, source, name, ts_ns, dur_us,
    msg_bytes, msg_nelems, dtype, group_size, algbw_gbps, busbw_gbps, pg_name, pg_desc, device, stream
FROM int_collectives;
