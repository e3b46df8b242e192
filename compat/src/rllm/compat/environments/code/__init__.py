"""rLLM v0.2's `rllm.environments.code`: `CompetitionCodingEnv` (see `competition_coding.py`)."""
