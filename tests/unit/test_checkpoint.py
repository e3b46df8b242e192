import pytest
import torch

from rllm.training.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint, save_checkpoint


def test_round_trip_and_latest_pointer(tmp_path):
    save_checkpoint(tmp_path, 1, {"model": {"w": torch.ones(2)}, "trainer": {"pos": 3}})
    path = save_checkpoint(tmp_path, 2, {"model": {"w": torch.zeros(2)}, "trainer": {"pos": 6}})
    assert latest_checkpoint(tmp_path) == path
    step, parts = load_checkpoint(path)
    assert step == 2 and parts["trainer"] == {"pos": 6} and torch.equal(parts["model"]["w"], torch.zeros(2))
    # nothing half-written is left next to the checkpoints
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step_000001", "step_000002"]


def test_a_corrupted_file_is_refused(tmp_path):
    path = save_checkpoint(tmp_path, 3, {"model": {"w": torch.ones(4)}})
    data = bytearray((path / "model.pt").read_bytes())
    data[-10] ^= 0xFF
    (path / "model.pt").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="checksum"):
        load_checkpoint(path)


def test_a_folder_without_manifest_is_not_a_checkpoint(tmp_path):
    (tmp_path / "checkpoints" / "step_000001").mkdir(parents=True)
    with pytest.raises(CheckpointError, match="manifest"):
        load_checkpoint(tmp_path / "checkpoints" / "step_000001")
    assert latest_checkpoint(tmp_path) is None


def test_saving_the_same_step_again_replaces_it(tmp_path):
    save_checkpoint(tmp_path, 1, {"trainer": {"v": 1}})
    path = save_checkpoint(tmp_path, 1, {"trainer": {"v": 2}})
    assert load_checkpoint(path)[1]["trainer"] == {"v": 2}
