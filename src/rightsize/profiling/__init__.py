"""Measuring real PyTorch workloads on a device: B_max, latencies, layers, memory (Srift §4.1)."""
