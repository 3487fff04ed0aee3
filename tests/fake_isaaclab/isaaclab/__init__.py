"""Stand-in for Isaac Lab's package (tests only)."""
