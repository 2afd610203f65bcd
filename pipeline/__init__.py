"""The audit pipeline (PySpark): read what the broker's audit stream recorded, summarise it, and
replay it through the project's own quota classes under candidate settings.

Modules: `schema` (the audit event as a Spark StructType), `read` (a broker data dir or a trace file
into a typed DataFrame), `replay` (what-if replay per principal), `jobs` (summaries, state over
time, recommendations), `report` (Parquet tables, PNG plots, an HTML page), `cli` (`scripts/pipeline`),
`gen` (`scripts/gen_trace`). Runs on embedded `local[*]` Spark by default and unchanged on a cluster.

Dependency direction: `pipeline` may import `storage`, `protocol` and `quotas`, never `minibroker`;
nothing imports `pipeline`.
"""
