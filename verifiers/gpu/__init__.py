"""GPU experiments: kernel runs against fp64, profiles, bitwise repeats, benchmarks, probes, Nsight counters."""
