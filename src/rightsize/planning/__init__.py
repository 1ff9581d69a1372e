"""Cloud plans: predict time and cost of configurations and pick the best (Srift, FC2)."""
