"""Development and demo tools: the SGLang stand-in, the local Kafka launcher, demo assets.

Never imported by a stage: only by the CLI, tests, benchmarks and the reliability harness.
"""
