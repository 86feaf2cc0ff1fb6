"""Engine benchmarks: physical floors, the Hugging Face baseline, and our engine's workloads."""
