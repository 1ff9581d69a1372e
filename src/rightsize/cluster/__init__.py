"""Many jobs on one cluster: scheduler, trace-driven simulator, simulated job model, reports."""
