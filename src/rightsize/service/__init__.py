"""The service (DESIGN.md's Brain): a store of every run, a scheduler that runs many real
jobs on one capacity, token access, and the REST API over them (``rightsize serve``)."""
