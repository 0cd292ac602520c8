"""Reliability suite: the pipeline under kills, restarts, faults and hostile input, books balanced."""
