"""This distribution's tests run in the repository, beside the core's (`make test`, `make check`: `pytest tests
compat/tests`), with the core's shared fixtures. tests/conftest.py also marks their slow ones and orders them."""

from tests.conftest import chromium, qwen_tokenizer, smollm2_tokenizer, tiny_model_dir  # noqa: F401  (fixtures)
