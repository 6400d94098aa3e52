-- The `otel_traces` table exactly as the OpenTelemetry Collector's ClickHouse exporter creates it
-- (opentelemetry-collector-contrib exporter/clickhouseexporter, internal/sql_templates/traces_table.sql,
-- the schema with ScopeName/ScopeVersion and `Duration UInt64`; since contrib v0.108.0 the exporter
-- writes SpanKind and StatusCode as pdata strings: 'Internal', 'Error', ...; before, 'SPAN_KIND_INTERNAL',
-- 'STATUS_CODE_ERROR'). Attribute values are stored as strings (pcommon.Value.AsString: booleans
-- 'true'/'false', integers in decimal, arrays and maps as JSON).
--
-- `etf-otel audit --engine chdb` creates this table inside embedded chDB and loads OTLP JSON files
-- into it; audit_findings.sql only reads the columns listed in its header.
-- The cluster clause, TTL and engine options the exporter can add are left out (they do not change
-- the columns).
CREATE TABLE IF NOT EXISTS {database:Identifier}.{table:Identifier} (
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ParentSpanId String CODEC(ZSTD(1)),
    TraceState String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    SpanAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    Duration UInt64 CODEC(ZSTD(1)),
    StatusCode LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage String CODEC(ZSTD(1)),
    Events Nested (
        Timestamp DateTime64(9),
        Name LowCardinality(String),
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    Links Nested (
        TraceId String,
        SpanId String,
        TraceState String,
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_key mapKeys(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_value mapValues(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1
) ENGINE = MergeTree()
PARTITION BY toDate(Timestamp)
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp))
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1
