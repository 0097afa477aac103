-- Everything the critical path of a step walks through, in one shape: CPU
-- ops, CPU user annotations and runtime calls on their threads, and kernels,
-- copies and memsets on their streams, each GPU operation with the event id
-- of the runtime call that launched it. tracedb/critical_path.py reads one
-- trace file's rows of it.
-- Grain: one row per CPU op, CPU annotation, runtime call, kernel, copy or memset.
-- requires: stg_cpu_ops, stg_annotations, stg_runtime_calls, int_stream_ops, int_comm_names
CREATE OR REPLACE VIEW int_path_events AS
SELECT run, rank, phase, file_id, event_id,
    -- cpu (on a thread) or gpu (on a stream).
    'cpu' AS side,
    -- cpu_op, annotation, runtime (runtime and driver calls), kernel, comm, memcpy or memset.
    'cpu_op' AS kind,
    -- Event name.
    name,
    -- Process id (CPU side).
    pid,
    -- Thread id (CPU side).
    tid,
    -- GPU index (GPU side).
    NULL::BIGINT AS device,
    -- Stream (GPU side).
    NULL::BIGINT AS stream,
    -- Start, nanoseconds.
    ts_ns,
    -- End, nanoseconds.
    end_ns,
    -- Event id of the runtime call that launched a GPU operation.
    NULL::BIGINT AS launch_event_id
FROM stg_cpu_ops
UNION ALL
SELECT run, rank, phase, file_id, event_id, 'cpu', 'annotation', name, pid, tid, NULL, NULL, ts_ns, end_ns, NULL
FROM stg_annotations
WHERE side = 'cpu'
UNION ALL
SELECT run, rank, phase, file_id, event_id, 'cpu', 'runtime', name, pid, tid, NULL, NULL, ts_ns, end_ns, NULL
FROM stg_runtime_calls
WHERE lower(cat) <> 'cuda_sync'
UNION ALL
SELECT o.run, o.rank, o.phase, o.file_id, o.event_id, 'gpu',
       CASE WHEN o.kind = 'kernel' AND n.name IS NOT NULL THEN 'comm' ELSE o.kind END,
       o.name, NULL, NULL, o.device, o.stream, o.ts_ns, o.end_ns, o.launch_event_id
FROM int_stream_ops o
LEFT JOIN int_comm_names n ON n.source = 'kernel' AND n.name = o.name;
