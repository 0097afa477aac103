-- The catalog's bookkeeping moves out of main, where BI clients look for the
-- tables and marts, into tracedb_meta (schema_version moves there before the
-- migrations run: catalog.migrate). The library's docs and the copy of
-- comm_patterns.csv are re-made there on every build.
CREATE SCHEMA IF NOT EXISTS tracedb_meta;
CREATE TABLE tracedb_meta.catalog_info (
    key VARCHAR PRIMARY KEY,
    value VARCHAR
);
INSERT INTO tracedb_meta.catalog_info SELECT key, value FROM main.catalog_info;
DROP TABLE main.catalog_info;
DROP TABLE IF EXISTS main.tracedb_views;
DROP TABLE IF EXISTS main.tracedb_view_columns;
DROP TABLE IF EXISTS main.user_comm_patterns;
