-- GPU kernels (CUDA, ROCm; MTIA device ops), typed and renamed. Kineto
-- writes them with cat 'kernel' on pid = device, tid = stream.
-- Grain: one row per kernel execution.
CREATE OR REPLACE VIEW stg_kernels AS
SELECT
    run,
    rank,
    phase,
    file_id,
    event_id,
    -- Kernel name as the trace writes it.
    name,
    -- Start, nanoseconds.
    ts_ns,
    -- Duration, nanoseconds.
    dur_ns,
    -- End (ts_ns + dur_ns), nanoseconds.
    ts_ns + dur_ns AS end_ns,
    -- GPU index (args.device, else pid).
    coalesce(device, TRY_CAST(pid AS BIGINT)) AS device,
    -- Stream (args.stream, else tid).
    coalesce(stream, TRY_CAST(tid AS BIGINT)) AS stream,
    -- Runtime correlation id linking the kernel to its launch call.
    correlation,
    -- External id linking the kernel to the CPU op that launched it.
    external_id,
    -- Grid dimensions [x, y, z].
    grid,
    -- Block dimensions [x, y, z].
    block,
    -- Complete args.
    args
FROM events
WHERE ph = 'X' AND lower(cat) IN ('kernel', 'mtia_ccp_events') AND dur_ns IS NOT NULL;
