"""Command-line front door."""
