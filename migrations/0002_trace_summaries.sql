-- Per-trace summaries (summaries.py): view -> Parquet file relative to the
-- warehouse, and the fingerprint of the view library and settings that made
-- them. NULL for traces ingested before summaries existed: `tracedb migrate`
-- computes them.
ALTER TABLE traces ADD COLUMN summaries JSON;
ALTER TABLE traces ADD COLUMN summaries_fingerprint VARCHAR;
