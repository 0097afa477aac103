-- Every GPU kernel with the CPU call that launched it (same trace file and
-- correlation id), the CPU op that made that call (same External id) and the
-- profiler step of the launch. Launch columns are NULL when the trace holds
-- no call for the kernel's correlation (launched before the window opened).
-- Grain: one row per kernel.
-- requires: stg_kernels, int_launch_calls, stg_cpu_ops
CREATE OR REPLACE VIEW int_kernel_launches AS
SELECT
    k.run, k.rank, k.phase, k.file_id, k.event_id,
    -- Kernel name.
    k.name,
    -- Kernel start, nanoseconds.
    k.ts_ns,
    -- Kernel duration, nanoseconds.
    k.dur_ns,
    -- Kernel end, nanoseconds.
    k.end_ns,
    -- GPU index.
    k.device,
    -- Stream.
    k.stream,
    -- Correlation id linking the kernel to its launch call.
    k.correlation,
    -- Event id of the launch call.
    l.event_id AS launch_event_id,
    -- Launch call (cudaLaunchKernel, cuLaunchKernel, hipLaunchKernel, ...).
    l.name AS launch_name,
    -- Launch call start, nanoseconds.
    l.ts_ns AS launch_ts_ns,
    -- Launch call duration, nanoseconds.
    l.dur_ns AS launch_dur_ns,
    -- Process id of the launching thread.
    l.pid AS launch_pid,
    -- Launching thread.
    l.tid AS launch_tid,
    -- External id of the launching CPU op (the call's, else the kernel's).
    coalesce(l.external_id, k.external_id) AS external_id,
    -- Event id of the CPU op that launched the kernel.
    o.event_id AS cpu_op_event_id,
    -- Name of the CPU op that launched the kernel (aten::mm, ...).
    o.name AS cpu_op_name,
    -- Profiler step of the launch; NULL outside steps or without a launch call.
    l.step
FROM stg_kernels k
LEFT JOIN int_launch_calls l
    ON l.file_id = k.file_id
   AND l.correlation = k.correlation
LEFT JOIN stg_cpu_ops o
    ON o.file_id = k.file_id
   AND o.external_id = coalesce(l.external_id, k.external_id);
