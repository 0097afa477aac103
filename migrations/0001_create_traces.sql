-- One row per ingested trace file (and per file that failed to ingest).
CREATE TABLE traces (
    file_id VARCHAR NOT NULL,
    run VARCHAR NOT NULL,
    rank BIGINT NOT NULL,
    phase VARCHAR NOT NULL,
    status VARCHAR NOT NULL,
    error VARCHAR,
    source_path VARCHAR NOT NULL,
    source_bytes BIGINT,
    source_mtime_ns BIGINT,
    rank_source VARCHAR,
    form VARCHAR,
    json_event_count BIGINT,
    event_count BIGINT,
    flow_count BIGINT,
    counter_count BIGINT,
    unmatched_begin_count BIGINT,
    unmatched_end_count BIGINT,
    ts_min_ns BIGINT,
    ts_max_ns BIGINT,
    base_time_ns BIGINT,
    distributed_info JSON,
    device_properties JSON,
    trace_name VARCHAR,
    display_time_unit VARCHAR,
    schema_version VARCHAR,
    metadata JSON,
    warnings VARCHAR,
    files JSON,
    tracedb_version VARCHAR,
    ingest_seconds DOUBLE,
    ingested_at TIMESTAMPTZ
);

CREATE TABLE catalog_info (
    key VARCHAR PRIMARY KEY,
    value VARCHAR
);
