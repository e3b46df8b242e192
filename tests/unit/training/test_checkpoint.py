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


# ---- crash safety: what a killed save leaves, and damaged checkpoints ------------------------------------------


def _two_checkpoints(tmp_path):
    save_checkpoint(tmp_path, 1, {"trainer": {"w": torch.ones(2)}})
    return save_checkpoint(tmp_path, 2, {"trainer": {"w": torch.full((2,), 2.0)}})


def test_a_save_killed_between_its_two_renames_is_recovered(tmp_path):
    """install_dir_atomically moves the old folder aside, then renames the new one in: a kill in between leaves
    `latest` naming a folder that is not there, with both complete copies on disk."""
    from rllm.training.checkpoint import find_resumable_checkpoint

    final = _two_checkpoints(tmp_path)
    final.rename(final.with_name(f".{final.name}.old-4242"))  # set aside ...
    staged = final.with_name(f".{final.name}.tmp-4242")  # ... and the replacement still staged
    staged.mkdir()
    (staged / "trainer.pt").write_bytes(b"half written")
    found, notes = find_resumable_checkpoint(tmp_path)
    assert found == final and load_checkpoint(found)[1]["trainer"]["w"][0] == 2
    assert any("restored step_000002" in n for n in notes) and any("removed .step_000002.tmp-4242" in n for n in notes)
    assert not list((tmp_path / "checkpoints").glob(".step_*"))  # nothing a killed save left stays behind


def test_leftover_staging_folders_are_removed_on_resume(tmp_path):
    from rllm.training.checkpoint import find_resumable_checkpoint

    _two_checkpoints(tmp_path)
    for name in (".step_000003.tmp-1", ".step_000001.old-7"):
        (tmp_path / "checkpoints" / name).mkdir()
        (tmp_path / "checkpoints" / name / "trainer.pt").write_bytes(b"x" * 10)
    found, notes = find_resumable_checkpoint(tmp_path)
    assert found.name == "step_000002" and len(notes) == 2
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step_000001", "step_000002"]


def test_a_new_latest_pointer_left_by_a_killed_save_is_removed_on_resume(tmp_path):
    """Found by the reliability tier: a kill between writing `.latest.tmp-PID` and its rename left that file forever."""
    from rllm.training.checkpoint import find_resumable_checkpoint

    _two_checkpoints(tmp_path)
    (tmp_path / "checkpoints" / ".latest.tmp-4242").write_text("step_000003")
    found, notes = find_resumable_checkpoint(tmp_path)
    assert found.name == "step_000002" and notes == ["removed .latest.tmp-4242, left by a killed save"]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step_000001", "step_000002"]


def test_a_manifest_claiming_another_step_is_refused_and_the_previous_checkpoint_is_used(tmp_path):
    import json

    from rllm.training.checkpoint import find_resumable_checkpoint

    newest = _two_checkpoints(tmp_path)
    manifest = json.loads((newest / "manifest.json").read_text())
    manifest["step"] = 7  # the run would claim a step it never trained
    (newest / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="does not match its checksum"):
        load_checkpoint(newest)
    found, notes = find_resumable_checkpoint(tmp_path)
    assert found.name == "step_000001"
    assert any("step_000002/manifest.json does not match its checksum" in n for n in notes)


def test_a_manifest_renamed_into_another_steps_folder_is_refused(tmp_path):
    _two_checkpoints(tmp_path)
    root = tmp_path / "checkpoints"
    (root / "step_000002" / "manifest.json").write_bytes((root / "step_000001" / "manifest.json").read_bytes())
    with pytest.raises(CheckpointError, match="says step 1, its folder is step_000002"):
        load_checkpoint(root / "step_000002")


def test_a_manifest_that_is_not_json_names_the_file_and_falls_back(tmp_path):
    from rllm.training.checkpoint import find_resumable_checkpoint

    newest = _two_checkpoints(tmp_path)
    (newest / "manifest.json").write_text('{"step": 2, "files": {')
    with pytest.raises(CheckpointError, match=r"step_000002/manifest.json is damaged"):
        load_checkpoint(newest)
    found, notes = find_resumable_checkpoint(tmp_path)
    assert found.name == "step_000001" and "manifest.json is damaged" in notes[-1]
    (found / "manifest.json").write_text("not json")
    with pytest.raises(CheckpointError, match=r"no intact checkpoint to resume from: .*step_000002.*step_000001"):
        find_resumable_checkpoint(tmp_path)


def test_pruning_keeps_the_newest_and_what_latest_names_and_a_killed_prune_is_cleaned_up(tmp_path):
    from rllm.training.checkpoint import find_resumable_checkpoint, prune_checkpoints

    for step in range(1, 6):
        save_checkpoint(tmp_path, step, {"trainer": {"pos": step}})
    assert prune_checkpoints(tmp_path, None) == []  # keep all
    assert prune_checkpoints(tmp_path, 2) == ["step_000001", "step_000002", "step_000003"]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step_000004", "step_000005"]
    # a prune killed after setting a folder aside leaves a dot-folder, which the next resume removes, never restores
    (tmp_path / "checkpoints" / "step_000004").rename(tmp_path / "checkpoints" / ".step_000004.prune-7")
    found, notes = find_resumable_checkpoint(tmp_path)
    assert found.name == "step_000005" and notes == ["removed .step_000004.prune-7, left by a killed save"]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step_000005"]
