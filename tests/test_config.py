"""TrainConfig: validation messages name the flag, CLI flags and JSON round-trip agree."""

import argparse

import pytest

from pipeline.config import TrainConfig, add_train_arguments
from pipeline.errors import ConfigError


@pytest.mark.parametrize(
    "changes, flag",
    [
        ({"device": "tpu"}, "--device"),
        ({"quantization": "2bit"}, "--quantization"),
        ({"lora_rank": 0}, "--lora-rank"),
        ({"batch_size": -1}, "--batch-size"),
        ({"max_steps": 0}, "--max-steps"),
        ({"lora_dropout": 1.0}, "--lora-dropout"),
        ({"learning_rate": 5.0}, "--learning-rate"),
        ({"max_length": 100}, "--max-length"),
        ({"eval_steps": -2}, "--eval-steps"),
        ({"optimizer": "sgd"}, "--optimizer"),
    ],
)
def test_bad_settings_name_the_flag_and_the_value(changes, flag):
    with pytest.raises(ConfigError) as error:
        TrainConfig(**changes)
    message = str(error.value)
    assert flag in message
    assert repr(next(iter(changes.values()))) in message


def test_cli_flags_round_trip_through_json():
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    args = parser.parse_args(
        ["--quantization", "none", "--lora-rank", "8", "--no-gradient-checkpointing", "--learning-rate", "1e-4"]
    )
    config = TrainConfig.from_args(args)
    assert (config.quantization, config.lora_rank, config.gradient_checkpointing) == ("none", 8, False)
    assert config.learning_rate == 1e-4
    assert config.batch_size == TrainConfig().batch_size  # unset flags keep the defaults
    assert TrainConfig.from_dict(config.to_dict()) == config
    assert config.effective_batch_size == config.batch_size * config.grad_accum


def test_unknown_keys_in_a_saved_config_are_refused():
    with pytest.raises(ConfigError, match="Unknown training settings"):
        TrainConfig.from_dict({"lora_rank": 8, "lora_rankk": 16})
