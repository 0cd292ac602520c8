"""Operating a running pipeline: status, dead-letter reading and re-drive."""
