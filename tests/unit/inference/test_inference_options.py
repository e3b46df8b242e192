"""`InferenceOptions`, the local engine's one settings object, and `config.inference_options`, the one place the
trainer, `rllm eval` and the gateway build it from the config."""

from __future__ import annotations

import dataclasses

import pytest

from rllm.config import ConfigError, TrainConfig, inference_options, load_config
from rllm.inference import InferenceOptions


def test_the_defaults_are_those_of_the_releases_before():
    options = InferenceOptions()
    assert (options.max_batch_size, options.seed, options.prefix_cache_tokens) == (32, 0, 65536)
    assert options.cuda_graphs and options.packed_linears
    assert options.device is options.dtype is options.eos_token_ids is options.num_threads is None


def test_options_are_frozen_and_keep_token_ids_as_a_tuple():
    options = InferenceOptions(eos_token_ids=[2, 7])
    assert options.eos_token_ids == (2, 7)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.seed = 1  # type: ignore[misc]
    assert hash(options) == hash(InferenceOptions(eos_token_ids=(2, 7)))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"max_batch_size": 0}, ValueError, r"^InferenceOptions.max_batch_size must be >= 1, got 0$"),
        ({"prefix_cache_tokens": -1}, ValueError, r"^InferenceOptions.prefix_cache_tokens must be >= 0, got -1$"),
        ({"num_threads": 0}, ValueError, r"^InferenceOptions.num_threads must be >= 1, got 0$"),
        ({"seed": "1"}, TypeError, r"^InferenceOptions.seed must be an integer, got '1'$"),
        ({"max_batch_size": True}, TypeError, r"^InferenceOptions.max_batch_size must be an integer, got True$"),
        ({"cuda_graphs": 1}, TypeError, r"^InferenceOptions.cuda_graphs must be True or False, got 1$"),
        ({"eos_token_ids": "2"}, TypeError, r"^InferenceOptions.eos_token_ids must be token ids"),
        ({"eos_token_ids": (2, -1)}, ValueError, r"^InferenceOptions.eos_token_ids must be >= 0, got -1$"),
    ],
)
def test_bad_options_are_refused_in_one_line_naming_the_field(kwargs, error, message):
    with pytest.raises(error, match=message):
        InferenceOptions(**kwargs)


def test_the_config_gives_the_engine_the_settings_it_fed_it_before():
    # before the options object: max_batch_size=rollout.n_parallel and seed=trainer.seed, the rest LocalModel's own
    default = inference_options(TrainConfig())
    assert default == InferenceOptions(max_batch_size=32, seed=0)
    config = load_config(None, ["rollout.n_parallel=6", "trainer.seed=5"])
    assert inference_options(config) == InferenceOptions(max_batch_size=6, seed=5)


def test_the_inference_section_sets_each_option():
    config = load_config(
        None,
        [
            "inference.max_batch_size=3",
            "inference.prefix_cache_tokens=0",
            "inference.packed_linears=false",
            "inference.num_threads=1",
        ],
    )
    assert inference_options(config) == InferenceOptions(
        max_batch_size=3, prefix_cache_tokens=0, packed_linears=False, num_threads=1
    )
    on_gpu = load_config(None, ["model.device=cuda", "inference.cuda_graphs=false"])  # CUDA graphs: GPUs only
    assert inference_options(on_gpu) == InferenceOptions(max_batch_size=32, cuda_graphs=False)


def test_the_inference_section_is_validated():
    with pytest.raises(ConfigError, match="inference.max_batch_size"):
        load_config(None, ["inference.max_batch_size=0"])
    with pytest.raises(ConfigError, match="inference.prefix_cache"):
        load_config(None, ["inference.prefix_cache=false"])  # the key is prefix_cache_tokens


def test_local_model_takes_only_an_options_object(smollm2_tokenizer):
    from rllm.inference.model import LocalModel
    from rllm.models.registry import build_tiny_model

    model = build_tiny_model(smollm2_tokenizer, seed=0)
    with pytest.raises(TypeError, match="LocalModel takes an InferenceOptions, got dict"):
        LocalModel(model, smollm2_tokenizer, {"max_batch_size": 2})
    with LocalModel(model, smollm2_tokenizer, InferenceOptions(max_batch_size=2, prefix_cache_tokens=0)) as local:
        assert local.max_batch_size == 2 and local._scheduler.max_batch_size == 2
        assert local.options.prefix_cache_tokens == 0 and local._scheduler.prefixes.max_tokens == 0
