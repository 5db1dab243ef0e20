"""plnt's benchmarks, behind `plnt bench`: functions, the scheduler, render, gRPC load, the
gate client and CEL. Tests never time anything; figures come from here only."""
