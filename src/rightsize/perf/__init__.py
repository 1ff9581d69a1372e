"""Performance predictors: small objects with predict() (and fit() where they learn)."""
