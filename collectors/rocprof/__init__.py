"""rocprof / rocprofv3 outputs: readers into the normalized Trace (registered in
collectors.registry).

Formats (their `source.format` names):
  rocpd           rocprofv3 SQLite `<pid>_results.db` (default since ROCm 7.0), also `.db.gz`
  rocprofv3-csv   `<prefix>_kernel_trace.csv` and its siblings (hip_api, marker_api, memory_copy,
                  agent_info), or `rocpd convert` CSV
  rocprofv3-json  JSON with top-level `rocprofiler-sdk-tool`
  pftrace         Perfetto protobuf `.pftrace`
  rocprof-v1      legacy `results.csv` / `results.json` (quoted ts/dur) / `results.db` (KERN table)
  rocprof-v2      rocprofv2 kernel CSV
A directory is read as the format it holds (every process's files of that format are stacked).
Capture: `collectors.rocprof.run`; ROCTx ranges from Python: `collectors.rocprof.roctx`.
"""
