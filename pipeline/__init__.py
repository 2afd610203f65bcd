"""The audit pipeline (PySpark): read what the broker's audit stream recorded, summarise it, replay it
through the project's own quota classes under the broker's recorded quotas and candidate settings,
and answer which `producer_ids_rate` to set.

Modules: `sources` (Spark Python data sources: the audit topic over the Kafka protocol in offset
ranges, or a data dir's segment files in byte ranges), `segments` (segment files in plain Python),
`read` (raw records or a trace file into a typed DataFrame, JSON parsed by Spark), `schema` (the
audit event as a Spark StructType), `timeline` (the broker's quota configuration over time, from
its audit), `replay` (one user under one setting, resumable), `whatif` (the replay in parallel across
users, settings and time chunks, aggregated in the tasks), `jobs` (summaries, new producer ids,
what the broker decided), `recommend` (the answer: X and Y), `model` (producer-state memory, the
needed-rate arithmetic), `report` (Parquet tables, PNG plots, an HTML page), `session` (the
SparkSession), `standalone` (`scripts/spark_standalone`), `cli` (`scripts/pipeline`), `gen`
(`scripts/gen_trace`). Runs on embedded `local[*]` Spark by default and unchanged on a cluster.

Dependency direction: `pipeline` may import `storage`, `protocol` and `quotas`, never `minibroker`;
nothing imports `pipeline`.
"""
