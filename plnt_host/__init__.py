"""The host: what loads and serves plnt's functions and previews their output.

`runtime` (load a function by name, serve it over gRPC; `trust` screens every request),
`render` and `render_cli` (`plnt render`), `validate`, `cli` (the `plnt` command),
`gate_cli` (`plnt gate`), `procs`, and `bench` (every benchmark). It imports `functions` and
the library `plnt`; neither imports it.
"""
