"""The accelerate config files shipped in recipes/accelerate/ load as accelerate cluster configs."""

import glob
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(__file__))
FILES = sorted(glob.glob(os.path.join(ROOT, "recipes", "accelerate", "*.yaml")))


def test_the_four_launch_configs_are_shipped():
    names = {os.path.basename(f) for f in FILES}
    assert {"ddp.yaml", "fsdp.yaml", "deepspeed_zero2.yaml", "deepspeed_zero3.yaml"} <= names


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_accelerate_config_loads(path):
    from accelerate.commands.config.config_args import ClusterConfig

    config = ClusterConfig.from_yaml_file(path)
    expected = {"ddp.yaml": "MULTI_GPU", "fsdp.yaml": "FSDP", "deepspeed_zero2.yaml": "DEEPSPEED",
                "deepspeed_zero3.yaml": "DEEPSPEED"}.get(os.path.basename(path))
    if expected:
        assert str(config.distributed_type).endswith(expected)
    if "zero" in path:
        assert config.deepspeed_config["zero_stage"] == int(path[-6])
