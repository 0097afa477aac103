-- Each GPU kernel with the runtime/driver call that launched it (matched on
-- correlation id) and the CPU op that made the call: the launch latency
-- (kernel start - launch call start: queueing plus launch overhead).
-- Launch columns are NULL for kernels whose launch the trace does not hold.
-- `tracedb query kernel_launches --run v2 --limit 20` (longest latency first)
-- Grain: one row per kernel.
-- requires: int_kernel_launches
-- order by: launch_latency_us DESC NULLS LAST, run, rank, phase, kernel_ts_ns
CREATE OR REPLACE VIEW kernel_launches AS
SELECT
    run, rank, phase, file_id, event_id,
    -- Profiler step of the launch; NULL outside steps or without a launch.
    step,
    -- Kernel name.
    name,
    -- GPU index.
    device,
    -- Stream.
    stream,
    -- Correlation id shared by the kernel and its launch call.
    correlation,
    -- Kernel start, nanoseconds.
    ts_ns AS kernel_ts_ns,
    -- Kernel duration, microseconds.
    dur_ns / 1e3 AS kernel_dur_us,
    -- Launch call (cudaLaunchKernel, cuLaunchKernel, hipLaunchKernel, ...); NULL when not in the trace.
    launch_name,
    -- Launch call start, nanoseconds.
    launch_ts_ns,
    -- Launch call duration, microseconds.
    launch_dur_ns / 1e3 AS launch_dur_us,
    -- Kernel start - launch call start, microseconds.
    (ts_ns - launch_ts_ns) / 1e3 AS launch_latency_us,
    -- Launching thread.
    launch_tid,
    -- CPU op that made the launch call (same External id); NULL when unknown.
    cpu_op_name,
    -- Event id of that CPU op.
    cpu_op_event_id
FROM int_kernel_launches;
