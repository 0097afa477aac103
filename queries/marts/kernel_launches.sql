-- Each GPU kernel with the runtime/driver call that launched it (matched on
-- correlation id) and the CPU op that made the call: the launch latency,
-- kernel start - launch call start. What it means depends on launch_kind:
-- kernel (cudaLaunchKernel, cuLaunchKernelEx, hipLaunchKernel, ...): one
-- call launched this one kernel, so the latency is its queueing plus launch
-- overhead. graph (cudaGraphLaunch, cuGraphLaunch, hipGraphLaunch): one call
-- launched a whole CUDA graph, whose kernels all share its correlation id;
-- the latency of the graph's first kernel (graph_position 1) is the graph's
-- launch latency, that of a later kernel also holds the time the kernels
-- before it in the graph took to run: it is the kernel's offset from the
-- graph launch, not a launch cost of its own.
-- Launch columns are NULL for kernels whose launch the trace does not hold.
-- `tracedb query kernel_launches --run v2 --limit 20` (longest latency first)
-- Grain: one row per kernel.
-- requires: int_kernel_launches
-- order by: launch_latency_us DESC NULLS LAST, run, rank, phase, kernel_ts_ns
CREATE OR REPLACE VIEW kernel_launches AS
WITH launches AS (
    SELECT
        run, rank, phase, file_id, event_id, step, name, device, stream, correlation, ts_ns, dur_ns, launch_name,
        launch_ts_ns, launch_dur_ns, launch_tid, cpu_op_name, cpu_op_event_id,
        CASE
            WHEN launch_name IS NULL THEN NULL
            WHEN regexp_matches(launch_name, 'GraphLaunch', 'i') THEN 'graph'
            ELSE 'kernel'
        END AS launch_kind,
        row_number() OVER (PARTITION BY file_id, correlation ORDER BY ts_ns, event_id) AS graph_position
    FROM int_kernel_launches
)
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
    -- kernel (a call that launched this kernel alone) or graph (a CUDA/HIP graph launch); NULL without a launch call.
    launch_kind,
    -- Order of the kernel within its graph launch by start (1: the first kernel the graph ran); NULL unless launch_kind is graph.
    CASE WHEN launch_kind = 'graph' THEN graph_position END AS graph_position,
    -- Launch call start, nanoseconds.
    launch_ts_ns,
    -- Launch call duration, microseconds.
    launch_dur_ns / 1e3 AS launch_dur_us,
    -- Kernel start - launch call start, microseconds (graph kernels: since the graph launch; see above).
    (ts_ns - launch_ts_ns) / 1e3 AS launch_latency_us,
    -- Launching thread.
    launch_tid,
    -- CPU op that made the launch call (same External id); NULL when unknown.
    cpu_op_name,
    -- Event id of that CPU op.
    cpu_op_event_id
FROM launches;
