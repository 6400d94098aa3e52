-- etf-otel audit: call-to-result linkage findings over the Collector ClickHouse exporter's `otel_traces`.
--
-- The same checks as the Python streaming audit (etf_otel/audit/_checks.py, check_trace), one row per finding:
--   group_trace  the trace whose check produced the finding (the proposal's trace for executions)
--   kind         orphaned_execution, duplicate_execution, unanswered_call, execution_without_result,
--                executed_rejected, refused_execution, orphaned_tool_message, recorded_violation,
--                missing_span, malformed_span, recorded_rejection, unjudged, unidentified_execution,
--                response_not_observed, unobserved_llm_call, history_drift, request_pairing
--                (etf_otel/audit/_kinds.py FindingKind: the same names)
--   trace_id, span_id, category (docs/categories.md, '' for none; fixed per kind as in model.py
--                FIXED_CATEGORY), call_id ('' for none), detail ('' for none), reason (the orphan reason of an
--                orphaned tool message or recorded orphaned_result, etf.linkage.orphan_reason; the
--                etf.divergence.kind of a recorded divergent_assembly or of a history_drift; '' for none)
--
-- Parameters (clickhouse-client: --param_database=otel --param_table=otel_traces --param_since_ns=0 ...):
--   database, table    where the exporter writes (defaults of the exporter: otel, otel_traces)
--   since_ns, until_ns time window, Unix nanoseconds, [since, until): a trace is audited, with all its
--                      spans, when at least one of its spans started inside the window.
--
-- Columns read: Timestamp, TraceId, SpanId, ParentSpanId, SpanName, SpanAttributes, Duration, StatusCode,
-- Events.Name, Events.Attributes, Links.TraceId, Links.SpanId. Absent and empty string are the same in the
-- Map(String, String) columns, as they are to the Python audit (it ignores empty ids and categories).
-- StatusCode 'Error' (exporter >= v0.108.0) and 'STATUS_CODE_ERROR' (earlier) are both understood.
--
-- The statements below run in one session, separated by lines ending in ';'. Intermediate results are
-- session TEMPORARY tables (ENGINE Memory; a read-only user needs readonly=2), so each step is computed
-- once and can be inspected: SELECT * FROM etf_spans, etf_judged, etf_executions, etf_resolved, etf_runs,
-- etf_findings, etf_tool_findings.
--
-- Where the Python audit depends on the order spans arrive in (ties it breaks by input order), this
-- query breaks them by start time, then span id: see etf_otel/audit/_sources/sql.py.
-- 1. One row per span of the traces in the window: its role and what the checks need (model.to_record).
DROP TEMPORARY TABLE IF EXISTS etf_spans;
CREATE TEMPORARY TABLE etf_spans ENGINE = Memory AS
SELECT * EXCEPT (input_list, message_calls, message_assistant, message_answers)  -- the messages are not kept:
    -- only the ids read from them, by message, of a span with a tool message
FROM (
WITH window_traces AS (
    SELECT DISTINCT TraceId
    FROM {database:Identifier}.{table:Identifier}
    WHERE Timestamp >= fromUnixTimestamp64Nano({since_ns:Int64})
      AND Timestamp < fromUnixTimestamp64Nano({until_ns:Int64})
)
SELECT
    TraceId AS trace_id,
    SpanId AS span_id,
    ParentSpanId AS parent_id,
    toUnixTimestamp64Nano(Timestamp) AS start_ns,
    start_ns + toInt64(Duration) AS end_ns,
    copies_end_ns,
    multiIf(
        SpanName = 'assemble_tool_call' OR startsWith(SpanName, 'assemble_tool_call '), 'call',
        SpanName = 'assemble_response', 'response',
        -- Google ADK's summary of parallel runs (attributes.ADK_MERGED_TOOLS): structure, not an execution
        SpanAttributes['gen_ai.tool.name'] = '(merged tools)', 'other',
        SpanName = 'execute_tool' OR startsWith(SpanName, 'execute_tool ')
            OR SpanAttributes['gen_ai.operation.name'] = 'execute_tool'
            -- other instrumentations' tool spans (etf_otel/audit/_foreign.py): OpenInference, OpenLLMetry
            OR SpanAttributes['openinference.span.kind'] = 'TOOL' OR SpanAttributes['traceloop.span.kind'] = 'tool',
            'execution',
        -- the mcp SDK's CLIENT span of a tools/call that etf-otel enriched (no span kind needed: the SDK
        -- sets gen_ai.operation.name on its SERVER span only)
        SpanAttributes['mcp.method.name'] = 'tools/call'
            AND (SpanAttributes['gen_ai.tool.call.id'] != '' OR SpanAttributes['etf.mcp.match'] != ''), 'remote_call',
        -- another instrumentation's LLM call
        SpanAttributes['gen_ai.operation.name'] IN ('chat', 'text_completion', 'generate_content')
            OR SpanAttributes['openinference.span.kind'] = 'LLM'
            OR SpanAttributes['llm.request.type'] IN ('chat', 'completion'), 'llm',
        'other') AS role,
    multiIf(role = 'call', SpanAttributes['gen_ai.tool.call.id'],
            role IN ('execution', 'remote_call'),
            if(SpanAttributes['gen_ai.tool.call.id'] != '', SpanAttributes['gen_ai.tool.call.id'],
               SpanAttributes['tool_call.id']),
            '') AS call_id,
    if(role = 'call' AND SpanAttributes['etf.tool_call.verdict'] IN ('proposed', 'rejected'),
       SpanAttributes['etf.tool_call.verdict'], '') AS verdict,
    if(role = 'call', JSONExtract(SpanAttributes['etf.tool_call.categories'], 'Array(String)'), [])
        AS categories,
    multiIf(
        role = 'call', SpanAttributes['error.type'],
        role IN ('execution', 'remote_call') AND SpanAttributes['error.type'] != '', SpanAttributes['error.type'],
        role IN ('execution', 'remote_call') AND StatusCode IN ('Error', 'STATUS_CODE_ERROR'), '_OTHER',
        '') AS error_type,
    if(role = 'response', SpanAttributes['etf.stream.state'], '') AS state,
    -- 1 true, 0 false, -1 absent or not a boolean
    multiIf(SpanAttributes['etf.stream.dispatchable'] = 'true', 1,
            SpanAttributes['etf.stream.dispatchable'] = 'false', 0, -1) AS dispatchable,
    role IN ('execution', 'remote_call') AND SpanAttributes['etf.guard.refused'] = 'true' AS refused,
    if(role = 'remote_call' AND SpanAttributes['etf.mcp.match'] IN ('explicit', 'unique', 'ambiguous', 'unmatched'),
       SpanAttributes['etf.mcp.match'], '') AS match,
    -- why an MCP server did not use our _meta keys (etf.mcp.meta_rejected, known values only)
    if(role = 'execution',
       arrayFilter(x -> x IN ('call_id_not_string', 'call_id_empty', 'call_id_too_long', 'call_id_not_printable',
                              'proposal_unparsed'),
                   JSONExtract(SpanAttributes['etf.mcp.meta_rejected'], 'Array(String)')),
       []) AS meta_rejected,
    -- settlement evidence: the previous response's proposals this request answered
    if(role = 'response',
       arrayFilter(x -> x != '', JSONExtract(SpanAttributes['etf.linkage.answered_ids'], 'Array(String)')),
       []) AS answered_ids,
    -- and the id-less proposals (identity by position) it answered, by their span ids
    if(role = 'response',
       arrayMap(x -> lower(x), arrayFilter(x -> x != '',
                JSONExtract(SpanAttributes['etf.linkage.answered_spans'], 'Array(String)'))),
       []) AS answered_spans,
    arrayFilter((t, s) -> t != '' AND s != '', Links.TraceId, Links.SpanId) AS link_traces,
    arrayFilter((s, t) -> t != '' AND s != '', Links.SpanId, Links.TraceId) AS link_spans,
    -- etf.integrity.violation events: (category, call id, orphan reason or divergence kind: model.DIVERGENCE_KINDS)
    arrayMap(a -> (a['etf.error.category'], a['gen_ai.tool.call.id'],
                   multiIf(a['etf.error.category'] = 'divergent_assembly',
                           if(a['etf.divergence.kind'] IN ('id_concatenated', 'id_replaced', 'id_missing', 'id_invented',
                                                           'name_concatenated', 'name_differs', 'call_split',
                                                           'calls_merged', 'arguments_differ', 'assembler_raised'),
                              a['etf.divergence.kind'], ''),
                           a['etf.linkage.orphan_reason'] IN ('concatenated_ids', 'rejected_call',
                                                              'rejected_incoming_id', 'unknown'),
                           a['etf.linkage.orphan_reason'], '')),
             arrayFilter((a, n) -> n = 'etf.integrity.violation' AND a['etf.error.category'] != '',
                         Events.Attributes, Events.Name)) AS violations,
    -- etf.linkage.drift events: (kind, preserved call id) (etf_otel/audit/_request.py; request.DRIFT_KINDS)
    arrayMap(a -> (if(a['etf.divergence.kind'] IN ('id_replaced', 'call_fabricated', 'refusal_answered', 'id_invented'),
                      a['etf.divergence.kind'], ''),
                   a['gen_ai.tool.call.id']),
             arrayFilter((a, n) -> n = 'etf.linkage.drift', Events.Attributes, Events.Name)) AS drifts,
    -- what a request's span recorded about its pairing (etf_otel/audit/_request.py read_pairing): its state,
    -- known problems and reasons (each once, sorted), whether the provider refused it
    if(SpanAttributes['etf.request.pairing'] IN ('broken', 'refused_unexplained'),
       SpanAttributes['etf.request.pairing'], '') AS pairing,
    arraySort(arrayDistinct(arrayFilter(
        x -> x IN ('result_without_call', 'call_without_result', 'duplicate_result', 'duplicate_call_id',
                   'id_rejected_by_target'),
        JSONExtract(SpanAttributes['etf.request.pairing_problems'], 'Array(String)')))) AS pairing_problems,
    arraySort(arrayDistinct(arrayFilter(
        x -> x IN ('history_trimmed', 'id_rewritten', 'concatenated_ids', 'unknown'),
        JSONExtract(SpanAttributes['etf.request.pairing_reasons'], 'Array(String)')))) AS pairing_reasons,
    SpanAttributes['etf.request.pairing_refused'] = 'true' AS pairing_refused,
    -- the messages sent to the model: the call ids each assistant message carries (Chat tool_calls, semconv
    -- parts, Anthropic content), whether each is an assistant turn, the ids each tool message answers
    -- (etf_otel/audit/_messages.py rounds); step 6b finds the answered turn once every proposal is known
    JSONExtractArrayRaw(SpanAttributes['gen_ai.input.messages']) AS input_list,
    arrayMap(m -> if(JSONExtractString(m, 'role') = 'assistant',
                     arrayFilter(x -> x != '', arrayConcat(
                         arrayMap(c -> JSONExtractString(c, 'id'), JSONExtractArrayRaw(m, 'tool_calls')),
                         arrayMap(p -> if(JSONExtractString(p, 'type') = 'tool_call', JSONExtractString(p, 'id'), ''),
                                  JSONExtractArrayRaw(m, 'parts')),
                         arrayMap(p -> if(JSONExtractString(p, 'type') = 'tool_use', JSONExtractString(p, 'id'), ''),
                                  JSONExtractArrayRaw(m, 'content')))),
                     []),
             input_list) AS message_calls,
    arrayMap(m -> JSONExtractString(m, 'role') = 'assistant', input_list) AS message_assistant,
    arrayMap(m -> if(JSONExtractString(m, 'role') = 'tool',
                     arrayFilter(x -> x != '', arrayConcat(
                         [JSONExtractString(m, 'tool_call_id')],
                         arrayMap(p -> if(JSONExtractString(p, 'type') = 'tool_call_response',
                                          JSONExtractString(p, 'id'), ''),
                                  JSONExtractArrayRaw(m, 'parts')))),
                     []),
             input_list) AS message_answers,
    -- ids answered by gen_ai.tool.message events (always judged)
    arrayFilter(x -> x != '',
                arrayMap((n, a) -> if(n = 'gen_ai.tool.message',
                                      if(a['gen_ai.tool.call.id'] != '', a['gen_ai.tool.call.id'], a['id']), ''),
                         Events.Name, Events.Attributes)) AS told,
    -- every id a tool message of the span answers
    arrayConcat(told, arrayFlatten(message_answers)) AS tool_messages,
    if(length(tool_messages) > 0, message_calls, []) AS turn_calls,
    if(length(tool_messages) > 0, message_assistant, []) AS turn_assistant,
    if(length(tool_messages) > 0, message_answers, []) AS turn_answers,
    -- contract attributes that are missing (docs/telemetry.md)
    arrayConcat(
        arrayMap(n -> 'etf.integrity.violation event without etf.error.category',
                 arrayFilter((n, a) -> n = 'etf.integrity.violation' AND a['etf.error.category'] = '',
                             Events.Name, Events.Attributes)),
        multiIf(
            -- a proposal without id is judged by its span where its protocol identifies calls by position
            -- (Gemini without ids: etf.id.positional, a positive count; model._positional)
            role = 'call', arrayConcat(if(verdict = '', ['etf.tool_call.verdict'], []),
                                       if(verdict = 'proposed' AND call_id = ''
                                              AND NOT match(SpanAttributes['etf.id.positional'], '^[1-9][0-9]*$'),
                                          ['gen_ai.tool.call.id'], [])),
            -- a request refused before any response (the provider's 400, the request guard) has no stream
            role = 'response' AND state = '' AND dispatchable = -1 AND SpanAttributes['error.type'] != '', [],
            role = 'response', arrayConcat(if(state = '', ['etf.stream.state'], []),
                                           if(dispatchable = -1, ['etf.stream.dispatchable'], [])),
            role = 'remote_call' AND match IN ('explicit', 'unique') AND call_id = '', ['gen_ai.tool.call.id'],
            [])) AS problems
FROM (
    -- a span exported more than once is one span: the copy that started first, then ended first, then a failed
    -- one (checks.copy_rank); a settlement it records counts at the latest end of any copy (checks.Evidence)
    SELECT *, max(toUnixTimestamp64Nano(Timestamp) + toInt64(Duration)) OVER (PARTITION BY TraceId, SpanId)
              AS copies_end_ns
    FROM {database:Identifier}.{table:Identifier}
    WHERE TraceId IN window_traces
    ORDER BY Timestamp, Duration, StatusCode NOT IN ('Error', 'STATUS_CODE_ERROR')
    LIMIT 1 BY TraceId, SpanId
)
);

-- 1b. Other instrumentations' LLM calls with no assemble_response near them (etf_otel/audit/_responses.py):
--     observed when a response is their child, grandchild, parent or sibling.
DROP TEMPORARY TABLE IF EXISTS etf_unobserved;
CREATE TEMPORARY TABLE etf_unobserved ENGINE = Memory AS
WITH
    responses AS (SELECT trace_id, span_id, parent_id FROM etf_spans WHERE role = 'response'),
    above AS (
        SELECT trace_id, parent_id AS span_id FROM responses WHERE parent_id != ''
        UNION ALL
        SELECT r.trace_id, p.parent_id
        FROM responses AS r INNER JOIN etf_spans AS p ON p.trace_id = r.trace_id AND p.span_id = r.parent_id
        WHERE r.parent_id != '' AND p.parent_id != ''
    ),
    beside AS (
        SELECT trace_id, span_id FROM responses
        UNION ALL
        SELECT trace_id, parent_id FROM responses WHERE parent_id != ''
    )
SELECT trace_id, span_id
FROM etf_spans
WHERE role = 'llm'
  AND (trace_id, span_id) NOT IN (SELECT trace_id, span_id FROM above)
  AND NOT (parent_id != '' AND (trace_id, parent_id) IN (SELECT trace_id, span_id FROM beside));

-- 2. Each proposal judged: valid 1, rejected 0, -1 too incomplete to say; and the category if rejected.
DROP TEMPORARY TABLE IF EXISTS etf_judged;
CREATE TEMPORARY TABLE etf_judged ENGINE = Memory AS
WITH
    calls AS (
        SELECT trace_id, span_id, parent_id, start_ns, end_ns, call_id, verdict, categories, error_type
        FROM etf_spans WHERE role = 'call'
    ),
    responses AS (
        SELECT trace_id, span_id, parent_id, start_ns, end_ns, state, dispatchable
        FROM etf_spans WHERE role = 'response'
    ),
    -- Each call's assemble_response: its parent, else the latest-started sibling response containing it.
    call_response AS (
        SELECT trace_id, call_span, argMax(response_span, (priority, response_start)) AS response_span
        FROM (
            SELECT c.trace_id AS trace_id, c.span_id AS call_span, r.span_id AS response_span,
                   1 AS priority, r.start_ns AS response_start
            FROM calls AS c INNER JOIN responses AS r ON r.trace_id = c.trace_id AND r.span_id = c.parent_id
            UNION ALL
            SELECT c.trace_id, c.span_id, r.span_id, 0, r.start_ns
            FROM calls AS c INNER JOIN responses AS r ON r.trace_id = c.trace_id AND r.parent_id = c.parent_id
            WHERE r.start_ns <= c.start_ns AND c.end_ns <= r.end_ns
        )
        GROUP BY trace_id, call_span
    ),
    -- The first category of a response's calls (a rejected sibling blocks the whole response).
    response_category AS (
        SELECT cr.trace_id AS trace_id, cr.response_span AS response_span,
               argMin(c.categories[1], (c.start_ns, c.span_id)) AS category
        FROM call_response AS cr
        INNER JOIN calls AS c ON c.trace_id = cr.trace_id AND c.span_id = cr.call_span
        WHERE length(c.categories) > 0
        GROUP BY cr.trace_id, cr.response_span
    )
SELECT c.trace_id AS trace_id, c.span_id AS span_id, c.start_ns AS start_ns, c.end_ns AS end_ns,
       c.call_id AS call_id,
       cr.response_span AS response_span,
       multiIf(c.verdict = '', -1,
               c.verdict = 'rejected', 0,
               cr.response_span != '' AND r.dispatchable = 0, 0,
               1) AS valid,
       multiIf(valid != 0, '',
               c.verdict = 'rejected',
                   if(if(length(c.categories) > 0, c.categories[1], c.error_type) != '',
                      if(length(c.categories) > 0, c.categories[1], c.error_type), 'truncated_stream'),
               r.state != 'completed', 'truncated_stream',
               rc.category != '', rc.category,
               'missing_index') AS category
FROM calls AS c
LEFT JOIN call_response AS cr ON cr.trace_id = c.trace_id AND cr.call_span = c.span_id
LEFT JOIN responses AS r ON r.trace_id = c.trace_id AND r.span_id = cr.response_span
LEFT JOIN response_category AS rc ON rc.trace_id = c.trace_id AND rc.response_span = cr.response_span;

-- 3. Which spans are executions, each judged in one trace (group_trace): that of its first link when it
--    points into another trace, else its own (etf_otel/audit/_executions.py). One MCP tools/call leaves a
--    CLIENT span (remote_call) and, from an instrumented server, a SERVER span (execution) child of it:
--    the SERVER span is the execution, completed by its CLIENT parent's call id and link when it has none;
--    the CLIENT span is one only when no execution child is judged in the same trace.
DROP TEMPORARY TABLE IF EXISTS etf_executions;
CREATE TEMPORARY TABLE etf_executions ENGINE = Memory AS
WITH
    clients AS (
        SELECT trace_id, span_id, call_id, match, link_traces, link_spans,
               if(length(link_traces) > 0, link_traces[1], trace_id) AS group_trace
        FROM etf_spans WHERE role = 'remote_call'
    ),
    -- one execution recorded twice: an execution span inside another of the same call (a framework's span
    -- around ours) is the one judged, completed by its parent's id, link and error; the parent is not judged.
    -- The same for the mcp SDK's CLIENT span inside an execution span (a framework running an MCP tool),
    -- judged as a CLIENT span is, with no completion.
    nested AS (
        SELECT i.trace_id AS trace_id, i.span_id AS span_id, o.span_id AS outer_span, o.call_id AS call_id,
               o.link_traces AS link_traces, o.link_spans AS link_spans, o.error_type AS error_type,
               o.refused AS refused
        FROM etf_spans AS i
        INNER JOIN etf_spans AS o ON o.trace_id = i.trace_id AND o.span_id = i.parent_id
        WHERE i.role IN ('execution', 'remote_call') AND o.role = 'execution'
          AND i.span_id != o.span_id  -- no span is its own parent
          AND (i.call_id = '' OR o.call_id = '' OR i.call_id = o.call_id)
    ),
    inner_spans AS (
        SELECT e.trace_id AS trace_id, e.span_id AS span_id, e.parent_id AS parent_id, e.start_ns AS start_ns,
               if(e.call_id != '', e.call_id, n.call_id) AS call_id,
               if(length(e.link_traces) > 0, e.link_traces, n.link_traces) AS link_traces,
               if(length(e.link_traces) > 0, e.link_spans, n.link_spans) AS link_spans,
               if(e.error_type != '', e.error_type, n.error_type) AS error_type,
               e.refused OR n.refused AS refused, e.meta_rejected AS meta_rejected
        FROM etf_spans AS e
        LEFT JOIN nested AS n ON n.trace_id = e.trace_id AND n.span_id = e.span_id
        WHERE e.role = 'execution'
          AND (e.trace_id, e.span_id) NOT IN (SELECT trace_id, outer_span FROM nested)
    ),
    servers AS (
        SELECT e.trace_id AS trace_id, e.span_id AS span_id, e.parent_id AS parent_id, e.start_ns AS start_ns,
               e.error_type AS error_type, e.refused AS refused,
               length(e.link_traces) > 0 AND e.link_traces[1] != e.trace_id AS cross,
               -- completed by the CLIENT parent (LEFT JOIN: '' and [] when there is none)
               if(e.call_id != '', e.call_id, c.call_id) AS own_call_id,
               if(length(e.link_traces) > 0, e.link_traces, c.link_traces) AS own_link_traces,
               if(length(e.link_traces) > 0, e.link_spans, c.link_spans) AS own_link_spans,
               if(cross, e.link_traces[1], e.trace_id) AS group_trace,
               if(cross, e.link_spans[1], if(length(own_link_spans) > 0, own_link_spans[1], '')) AS link_span,
               if(cross, e.call_id, own_call_id) AS call_id,
               if(cross, '', c.match) AS match, e.meta_rejected AS meta_rejected
        FROM inner_spans AS e
        LEFT JOIN clients AS c ON c.trace_id = e.trace_id AND c.span_id = e.parent_id
    )
SELECT trace_id, span_id, start_ns, call_id, error_type, refused, group_trace, link_span, match, meta_rejected
FROM servers
-- completed by a CLIENT parent linking into another trace: the CLIENT span is judged there instead
WHERE cross OR length(own_link_traces) = 0 OR own_link_traces[1] = trace_id
UNION ALL
SELECT c.trace_id, c.span_id, s.start_ns, c.call_id, s.error_type, s.refused, c.group_trace,
       if(length(c.link_spans) > 0, c.link_spans[1], ''), c.match, []
FROM clients AS c
INNER JOIN etf_spans AS s ON s.trace_id = c.trace_id AND s.span_id = c.span_id
WHERE (c.trace_id, c.span_id, c.group_trace) NOT IN (
    SELECT trace_id, parent_id, group_trace FROM servers
    UNION ALL
    SELECT trace_id, parent_id, c2.group_trace
    FROM servers INNER JOIN clients AS c2 ON c2.trace_id = servers.trace_id AND c2.span_id = servers.parent_id
    WHERE c2.group_trace = c2.trace_id
);

-- 4. Executions, matched to a proposal of the trace they are judged in: link first, then call id.
DROP TEMPORARY TABLE IF EXISTS etf_resolved;
CREATE TEMPORARY TABLE etf_resolved ENGINE = Memory AS
WITH
    executions AS (SELECT * FROM etf_executions),
    -- Proposal by call id: the latest one started before the execution, else the earliest.
    by_call_id AS (
        SELECT e.group_trace AS group_trace, e.span_id AS execution_span,
               argMax(j.span_id, (j.start_ns <= e.start_ns,
                                  if(j.start_ns <= e.start_ns, j.start_ns, -j.start_ns), j.span_id)) AS target
        FROM executions AS e
        INNER JOIN etf_judged AS j ON j.trace_id = e.group_trace AND j.call_id = e.call_id
        WHERE e.call_id != ''
        GROUP BY e.group_trace, e.span_id
    ),
    -- call ids one span of the input proposed (matched across traces), and those several did (never matched)
    unique_ids AS (
        SELECT call_id, any(trace_id) AS p_trace, any(span_id) AS p_span, any(valid) AS p_valid,
               any(category) AS p_category
        FROM etf_judged WHERE call_id != '' GROUP BY call_id HAVING count() = 1
    ),
    link_target_present AS (
        SELECT e.group_trace AS group_trace, e.span_id AS execution_span
        FROM executions AS e
        INNER JOIN etf_spans AS s ON s.trace_id = e.group_trace AND s.span_id = e.link_span
        WHERE e.link_span != ''
    )
SELECT t.trace_id AS trace_id, t.span_id AS span_id, t.start_ns AS start_ns, t.group_trace AS group_trace,
       t.error_type AS error_type, t.refused AS refused, t.link_span AS link_span, t.target AS target,
       (t.group_trace, t.span_id) IN (SELECT group_trace, execution_span FROM link_target_present)
           AS link_present,
       j.valid AS valid, j.category AS target_category, j.call_id AS target_call_id,
       if(t.call_id != '', t.call_id, j.call_id) AS call_id, t.match AS match, t.meta_rejected AS meta_rejected,
       -- not matched in the trace it is judged in, nor left to a missing link target
       NOT refused AND target = '' AND NOT (link_span != '' AND NOT link_present) AS unmatched,
       unmatched AND u.call_id != '' AS elsewhere,
       u.p_trace AS elsewhere_trace, u.p_span AS elsewhere_span, u.p_valid AS elsewhere_valid,
       u.p_category AS elsewhere_category,
       unmatched AND t.call_id != '' AND u.call_id = ''
           AND t.call_id IN (SELECT call_id FROM etf_judged WHERE call_id != '') AS several,
       t.group_trace IN (SELECT trace_id FROM etf_unobserved) AS unobserved
FROM (
    SELECT e.trace_id AS trace_id, e.span_id AS span_id, e.start_ns AS start_ns, e.group_trace AS group_trace,
           e.error_type AS error_type, e.refused AS refused, e.link_span AS link_span, e.call_id AS call_id,
           e.match AS match, e.meta_rejected AS meta_rejected,
           if(linked.span_id != '', linked.span_id, b.target) AS target
    FROM executions AS e
    LEFT JOIN (SELECT trace_id, span_id FROM etf_spans WHERE role = 'call') AS linked
        ON linked.trace_id = e.group_trace AND linked.span_id = e.link_span
    LEFT JOIN by_call_id AS b ON b.group_trace = e.group_trace AND b.execution_span = e.span_id
) AS t
LEFT JOIN etf_judged AS j ON j.trace_id = t.group_trace AND j.span_id = t.target
LEFT JOIN unique_ids AS u ON u.call_id = t.call_id;

-- 5. Executions counted against a proposal (refused ones are not), in start order.
DROP TEMPORARY TABLE IF EXISTS etf_runs;
CREATE TEMPORARY TABLE etf_runs ENGINE = Memory AS
SELECT group_trace, target, trace_id, span_id, error_type, target_call_id,
       row_number() OVER (PARTITION BY group_trace, target ORDER BY start_ns, span_id) AS run,
       count() OVER (PARTITION BY group_trace, target) AS runs,
       last_value(trace_id) OVER w AS last_trace,
       last_value(span_id) OVER w AS last_span,
       last_value(error_type) OVER w AS last_error,
       min(error_type != '') OVER (PARTITION BY group_trace, target) AS all_failed
FROM etf_resolved
WHERE NOT refused AND target != ''
WINDOW w AS (PARTITION BY group_trace, target ORDER BY start_ns, span_id
             ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING);

-- 6. The findings of the checks.
DROP TEMPORARY TABLE IF EXISTS etf_findings;
CREATE TEMPORARY TABLE etf_findings ENGINE = Memory AS
WITH
    answered AS (
        SELECT DISTINCT trace_id, arrayJoin(tool_messages) AS call_id FROM etf_spans WHERE length(tool_messages) > 0
    ),
    -- Settlements by call id, in any trace of the window (checks.Evidence): a request's answered ids, an
    -- unanswered_call event (reported where it was recorded, step 6), or a refusal_answered drift event; the end
    -- of the latest span recording one.
    settled AS (
        SELECT call_id, max(at_ns) AS settled_ns
        FROM (
            SELECT arrayJoin(answered_ids) AS call_id, copies_end_ns AS at_ns FROM etf_spans WHERE length(answered_ids) > 0
            UNION ALL
            SELECT violation.2, copies_end_ns FROM etf_spans ARRAY JOIN violations AS violation
            WHERE violation.1 = 'unanswered_call' AND violation.2 != ''
            UNION ALL  -- a refused call answered with an error result (a refusal_answered drift event) is answered
            SELECT drift.2, copies_end_ns FROM etf_spans ARRAY JOIN drifts AS drift
            WHERE drift.1 = 'refusal_answered' AND drift.2 != ''
        )
        GROUP BY call_id
    ),
    -- Id-less proposals a request answered (etf.linkage.answered_spans), by span id (checks.Evidence.settles).
    settled_spans AS (
        SELECT arrayJoin(answered_spans) AS settled_span, max(copies_end_ns) AS settled_ns
        FROM etf_spans WHERE length(answered_spans) > 0 GROUP BY settled_span
    ),
    -- Proposals settled: by a tool message of their trace, or by a settlement recorded after them.
    settled_calls AS (
        SELECT j.trace_id AS trace_id, j.span_id AS span_id
        FROM etf_judged AS j INNER JOIN settled AS s ON s.call_id = j.call_id
        WHERE j.call_id != '' AND s.settled_ns >= j.end_ns
        UNION ALL
        SELECT j.trace_id, j.span_id
        FROM etf_judged AS j INNER JOIN settled_spans AS s ON s.settled_span = lower(j.span_id)
        WHERE j.call_id = '' AND s.settled_ns >= j.end_ns
        UNION ALL
        SELECT j.trace_id, j.span_id
        FROM etf_judged AS j INNER JOIN answered AS a ON a.trace_id = j.trace_id AND a.call_id = j.call_id
        WHERE j.call_id != ''
    ),
    -- Parents and same-trace link targets that never arrived.
    etf_references AS (
        SELECT trace_id, parent_id AS missing, concat('parent of ', span_id) AS detail,
               (start_ns, 0, span_id) AS rank
        FROM etf_spans WHERE parent_id != ''
        UNION ALL
        SELECT trace_id, link_pair.2, concat('link target of ', span_id), (start_ns, 1, span_id)
        FROM etf_spans ARRAY JOIN arrayZip(link_traces, link_spans) AS link_pair
        WHERE link_pair.1 = trace_id
    )
SELECT trace_id AS group_trace, 'malformed_span' AS kind, trace_id, span_id, '' AS category,
       '' AS call_id, concat('missing ', problem) AS detail
FROM etf_spans ARRAY JOIN problems AS problem

UNION ALL
SELECT trace_id, 'missing_span', trace_id, missing, '', '', argMin(detail, rank)
FROM etf_references
WHERE (trace_id, missing) NOT IN (SELECT trace_id, span_id FROM etf_spans)
GROUP BY trace_id, missing

UNION ALL  -- links from another trace into a span that never arrived
SELECT target_trace, 'missing_span', source_trace, target_span, '', '',
       concat('link target of ', min(source_span), ', in trace ', target_trace)
FROM (
    SELECT trace_id AS source_trace, span_id AS source_span, pair.1 AS target_trace, pair.2 AS target_span
    FROM etf_spans ARRAY JOIN arrayZip(link_traces, link_spans) AS pair
    WHERE pair.1 != trace_id
)
WHERE (target_trace, target_span) NOT IN (SELECT trace_id, span_id FROM etf_spans)
GROUP BY target_trace, source_trace, target_span

UNION ALL  -- an MCP SERVER span whose call id contradicts its CLIENT span's (the SERVER span's is judged)
SELECT e.trace_id, 'malformed_span', e.trace_id, e.span_id, '', e.call_id,
       'gen_ai.tool.call.id differs from its tools/call CLIENT span''s'
FROM etf_spans AS e
INNER JOIN etf_spans AS c ON c.trace_id = e.trace_id AND c.span_id = e.parent_id
WHERE e.role = 'execution' AND c.role = 'remote_call' AND e.call_id != '' AND c.call_id != ''
  AND e.call_id != c.call_id

UNION ALL
SELECT group_trace, 'refused_execution', trace_id, span_id,
       if(error_type != '', error_type, 'orphaned_result'), call_id, ''
FROM etf_resolved WHERE refused

UNION ALL  -- no call id and no link: unjudged, never an orphan
SELECT group_trace, 'unidentified_execution', trace_id, span_id, '', call_id,
       if(call_id = '',
          concat('no gen_ai.tool.call.id and no link',
                 if(match = '' AND length(meta_rejected) = 0, '',
                    concat(' (', arrayStringConcat(arrayConcat(
                        if(match != '', [concat('etf.mcp.match ', match)], []),
                        if(length(meta_rejected) > 0,
                           [concat('etf.mcp.meta_rejected ', arrayStringConcat(meta_rejected, ','))], [])), '; '),
                    ')'))),
          '')
FROM etf_resolved
WHERE unmatched AND call_id = ''

UNION ALL  -- an id no observed response proposed, in a trace with an LLM call etf-otel did not observe
SELECT e.group_trace, 'response_not_observed', e.trace_id, e.span_id, '', e.call_id,
       concat(toString(n.calls), ' LLM call(s) of the trace not observed')
FROM etf_resolved AS e
INNER JOIN (SELECT trace_id, count() AS calls FROM etf_unobserved GROUP BY trace_id) AS n
    ON n.trace_id = e.group_trace
WHERE e.unmatched AND e.call_id != '' AND NOT e.elsewhere AND NOT e.several AND e.unobserved

UNION ALL  -- an id several spans of the input proposed: it names no one proposal
SELECT group_trace, 'unjudged', trace_id, span_id, '', call_id, 'call id proposed by several spans of the input'
FROM etf_resolved
WHERE several

UNION ALL
SELECT group_trace, 'orphaned_execution', trace_id, span_id, 'orphaned_result', call_id, ''
FROM etf_resolved
WHERE unmatched AND call_id != '' AND NOT elsewhere AND NOT several AND NOT unobserved

UNION ALL  -- an execution of the one proposal of its id, in another trace, that the rules rejected
SELECT trace_id, 'executed_rejected', trace_id, span_id, elsewhere_category, call_id, ''
FROM etf_resolved
WHERE elsewhere AND elsewhere_valid = 0

UNION ALL  -- a response the rules rejected, executed or not
SELECT r.trace_id, 'recorded_rejection', r.trace_id, r.span_id,
       multiIf(r.state != 'completed', 'truncated_stream', rc.category != '', rc.category, 'missing_index'), '',
       if(length(rc.listed) > 0, concat('calls: ', arrayStringConcat(arraySort(rc.listed), ', ')), '')
FROM etf_spans AS r
LEFT JOIN (
    SELECT j.trace_id AS trace_id, j.response_span AS response_span,
           argMinIf(c.categories[1], (c.start_ns, c.span_id), length(c.categories) > 0) AS category,
           groupUniqArrayArray(c.categories) AS listed
    FROM etf_judged AS j INNER JOIN etf_spans AS c ON c.trace_id = j.trace_id AND c.span_id = j.span_id
    WHERE j.response_span != '' AND j.valid != -1
    GROUP BY j.trace_id, j.response_span
) AS rc ON rc.trace_id = r.trace_id AND rc.response_span = r.span_id
-- with a judged call: a text-only response proposed nothing the rules could reject
WHERE r.role = 'response' AND r.dispatchable = 0 AND rc.response_span != ''

UNION ALL  -- informational: another instrumentation's LLM call etf-otel did not observe
SELECT trace_id, 'unobserved_llm_call', trace_id, span_id, '', '', 'no assemble_response under or beside it'
FROM etf_unobserved

UNION ALL
SELECT group_trace, 'executed_rejected', trace_id, span_id, target_category, call_id, ''
FROM etf_resolved WHERE NOT refused AND target != '' AND valid = 0

UNION ALL
SELECT group_trace, 'duplicate_execution', trace_id, span_id, 'duplicate_result', target_call_id,
       concat(toString(runs), ' executions')
FROM etf_runs WHERE run > 1

UNION ALL
SELECT group_trace, 'execution_without_result', last_trace, last_span, 'unanswered_call', target_call_id,
       concat('error.type ', last_error)
FROM etf_runs
WHERE run = 1 AND all_failed
  AND (group_trace, target) NOT IN (SELECT trace_id, span_id FROM settled_calls)

UNION ALL  -- informational: a valid proposal with no execution and no settlement evidence either way
SELECT trace_id, 'unjudged', trace_id, span_id, '', call_id, 'no execution, no settlement recorded'
FROM etf_judged
WHERE valid = 1
  AND (trace_id, span_id) NOT IN (SELECT group_trace, target FROM etf_runs)
  AND (trace_id, span_id) NOT IN (SELECT trace_id, span_id FROM settled_calls)
  AND (trace_id, span_id) NOT IN (SELECT elsewhere_trace, elsewhere_span FROM etf_resolved WHERE elsewhere)
;

-- 6b. Tool messages, judged against the response their evidence names (etf_otel/audit/_tool_messages.py):
--     the call ids of the span's answered turn (the last assistant turn carrying a call id some span proposed)
--     that spans of the input proposed, else the calls of its trace. A turn naming a call id several spans proposed names no single response: unjudged. An orphaned
--     message says why: concatenated_ids (two or more of those calls' ids run together), rejected_call, unknown.
DROP TEMPORARY TABLE IF EXISTS etf_tool_findings;
CREATE TEMPORARY TABLE etf_tool_findings ENGINE = Memory AS
WITH
    proposers AS (
        SELECT call_id, uniqExact(trace_id, span_id) AS spans
        FROM etf_spans WHERE role = 'call' AND call_id != '' GROUP BY call_id
    ),
    trace_calls AS (
        SELECT trace_id, groupUniqArray(call_id) AS ids, groupUniqArrayIf(call_id, valid != 0) AS valid_ids
        FROM etf_judged WHERE call_id != '' GROUP BY trace_id
    ),
    -- the call ids of a span's history that some span proposed
    span_proposed AS (
        SELECT x.trace_id AS trace_id, x.span_id AS span_id, groupUniqArray(x.turn_id) AS proposed_ids
        FROM (SELECT trace_id, span_id, arrayJoin(arrayFlatten(turn_calls)) AS turn_id
              FROM etf_spans WHERE length(tool_messages) > 0) AS x
        INNER JOIN proposers AS p ON p.call_id = x.turn_id
        GROUP BY x.trace_id, x.span_id
    ),
    -- the answered turn (etf_otel/audit/_messages.py scope): the last assistant turn carrying a proposed call id,
    -- else the last with calls (0: none, every tool message is read); its answers up to the next assistant
    -- turn; after it, the tool messages that answer no call of a later turn (those belong to that later round)
    scoped AS (
        SELECT s.trace_id AS trace_id, s.span_id AS span_id, s.start_ns AS start_ns,
               arrayLastIndex(x -> hasAny(x, sp.proposed_ids), s.turn_calls) AS by_proposal,
               if(by_proposal > 0, by_proposal, arrayLastIndex(x -> length(x) > 0, s.turn_calls)) AS answered_turn,
               if(answered_turn > 0, s.turn_calls[answered_turn], []) AS assistant_ids,
               arrayFirstIndex((a, i) -> a AND i > answered_turn, s.turn_assistant,
                               arrayEnumerate(s.turn_assistant)) AS next_turn,
               arrayConcat(s.told, arrayFlatten(arrayMap(
                   (ids, i) -> multiIf(
                       answered_turn = 0, ids,
                       i <= answered_turn, [],
                       next_turn = 0 OR i < next_turn, ids,
                       arrayFilter(x -> NOT has(arrayFlatten(arraySlice(s.turn_calls, answered_turn + 1,
                                                                         i - answered_turn - 1)), x), ids)),
                   s.turn_answers, arrayEnumerate(s.turn_answers)))) AS read_ids
        FROM etf_spans AS s
        LEFT JOIN span_proposed AS sp ON sp.trace_id = s.trace_id AND sp.span_id = s.span_id
        WHERE length(s.tool_messages) > 0
    ),
    named AS (
        SELECT x.trace_id AS trace_id, x.span_id AS span_id, groupUniqArray(x.named_id) AS named,
               max(p.spans) > 1 AS several
        FROM (SELECT trace_id, span_id, arrayJoin(assistant_ids) AS named_id
              FROM scoped WHERE length(assistant_ids) > 0) AS x
        INNER JOIN proposers AS p ON p.call_id = x.named_id
        GROUP BY x.trace_id, x.span_id
    ),
    messages AS (
        SELECT trace_id, span_id, start_ns, arrayJoin(read_ids) AS message
        FROM scoped WHERE length(read_ids) > 0
    ),
    judged AS (
        SELECT m.trace_id AS trace_id, m.span_id AS span_id, m.start_ns AS start_ns, m.message AS message,
               if(length(n.named) > 0, n.named, tc.ids) AS calls,
               if(length(n.named) > 0,
                  arrayFilter(a -> has(tc.valid_ids, a) OR NOT has(tc.ids, a), n.named),
                  -- no assistant turn (previous_response_id): a proposal of any trace answers, unless
                  -- it is this trace's own call the rules rejected (judged here)
                  if(pr.spans > 0 AND NOT has(tc.ids, m.message), arrayPushBack(tc.valid_ids, m.message), tc.valid_ids)) AS good,
               multiIf(n.several, 'unjudged', has(good, m.message), 'answered', 'orphaned') AS state,
               multiIf(
                   lengthUTF8(m.message) <= 4096
                       AND match(m.message, concat('^(?:', arrayStringConcat(
                           arrayMap(x -> replaceRegexpAll(x, '[\\\\.+*?()|\\[\\]{}^$]', '\\\\\\0'),
                                    arrayFilter(x -> x != '', calls)), '|'), '){2,}$')),
                   'concatenated_ids',
                   has(calls, m.message), 'rejected_call',
                   'unknown') AS reason
        FROM messages AS m
        LEFT JOIN named AS n ON n.trace_id = m.trace_id AND n.span_id = m.span_id
        LEFT JOIN trace_calls AS tc ON tc.trace_id = m.trace_id
        LEFT JOIN proposers AS pr ON pr.call_id = m.message
    )
SELECT trace_id AS group_trace, 'orphaned_tool_message' AS kind, trace_id,
       first.1 AS span_id, 'orphaned_result' AS category, message AS call_id, '' AS detail, first.2 AS reason
FROM (SELECT trace_id, message, argMin((span_id, reason), (start_ns, span_id)) AS first
      FROM judged WHERE state = 'orphaned' GROUP BY trace_id, message)
UNION ALL
SELECT trace_id, 'unjudged', trace_id, first_span, '', message,
       'tool message: its assistant turn names a call id several spans proposed', ''
FROM (SELECT trace_id, message, argMin(span_id, (start_ns, span_id)) AS first_span,
             countIf(state != 'unjudged') AS judged_spans
      FROM judged GROUP BY trace_id, message)
WHERE judged_spans = 0;

-- 7. The result: the findings, and what the instrumentation recorded itself unless a check found the same
--    (an unanswered_call event naming a call is a settlement's evidence: reported as unanswered_call), and
--    what requests recorded about their histories (etf_otel/audit/_responses.py request_findings): one
--    history_drift per etf.linkage.drift event, its kind as detail and sub-kind; one request_pairing per span
--    whose request the provider's pairing rules refuse, its detail as request.Pairing.detail writes it.
SELECT group_trace, kind, trace_id, span_id, category, call_id, detail, '' AS reason FROM etf_findings
UNION ALL
SELECT group_trace, kind, trace_id, span_id, category, call_id, detail, reason FROM etf_tool_findings
UNION ALL
SELECT trace_id, 'history_drift', trace_id, span_id, '', drift.2, drift.1, drift.1
FROM etf_spans ARRAY JOIN drifts AS drift
UNION ALL
SELECT trace_id, 'request_pairing', trace_id, span_id, '', '',
       concat(pairing,
              if(length(pairing_problems) > 0, concat(': ', arrayStringConcat(pairing_problems, ', ')), ''),
              if(length(pairing_reasons) > 0, concat('; reasons ', arrayStringConcat(pairing_reasons, ', ')), ''),
              if(pairing_refused, '; refused by the provider', '')),
       ''
FROM etf_spans
WHERE pairing != ''
UNION ALL
SELECT trace_id,
       if(violation.1 = 'unanswered_call' AND violation.2 != '', 'unanswered_call', 'recorded_violation'),
       trace_id, span_id, violation.1, violation.2,
       if(violation.1 = 'unanswered_call' AND violation.2 != '', 'recorded by the instrumentation', ''),
       if(violation.1 IN ('orphaned_result', 'divergent_assembly'), violation.3, '')
FROM etf_spans ARRAY JOIN violations AS violation
WHERE (trace_id, violation.1, span_id) NOT IN (
        SELECT group_trace, category, span_id FROM etf_findings
        UNION ALL SELECT group_trace, category, span_id FROM etf_tool_findings)
  AND NOT (violation.2 != ''
           AND (trace_id, violation.1, violation.2) IN (
               SELECT group_trace, category, call_id FROM etf_findings
               UNION ALL SELECT group_trace, category, call_id FROM etf_tool_findings))
