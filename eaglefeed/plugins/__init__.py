"""Plugins loaded by inference engines, not by eaglefeed itself (each module stands alone)."""
