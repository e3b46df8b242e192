"""Images in messages (rllm.images): the canonical part from every input kind, normalisation, storage by hash, and
the engine carrying an environment's image into a JSON episode."""

from __future__ import annotations

import base64
import io
import json
import os

import pytest
from PIL import Image

from rllm.agents.base import BaseAgent
from rllm.engine import AgentExecutionEngine
from rllm.envs.checker import check_env
from rllm.errors import ImageError
from rllm.images import (
    IMAGE_REF_PREFIX,
    encode_pil_images,
    has_images,
    image_part,
    load_images,
    message_images,
    normalize_images,
    store_images,
)
from rllm.models.fake import FakeModel
from rllm.types import Episode, TerminationReason
from tests.support.envs import PictureEnv, picture


def _encoded(image: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


def _url(part: dict) -> str:
    assert part["type"] == "image_url"
    return part["image_url"]["url"]


def _decoded(url: str) -> Image.Image:
    _, payload = url.split(",", 1)
    return Image.open(io.BytesIO(base64.b64decode(payload)))


def _same_pixels(a: Image.Image, b: Image.Image) -> bool:
    return a.size == b.size and a.convert("RGB").tobytes() == b.convert("RGB").tobytes()


# ---- one image -> its canonical part --------------------------------------------------------------------------


def test_a_pil_image_becomes_a_png_data_url_with_its_pixels():
    image = picture()
    url = _url(image_part(image))
    assert url.startswith("data:image/png;base64,")
    assert _same_pixels(_decoded(url), image)


@pytest.mark.parametrize("fmt, kind", [("PNG", "png"), ("JPEG", "jpeg"), ("GIF", "gif"), ("WEBP", "webp")])
def test_bytes_keep_their_own_encoding_byte_for_byte(fmt, kind):
    data = _encoded(picture(), fmt)
    assert _url(image_part(data)) == f"data:image/{kind};base64," + base64.b64encode(data).decode()


def test_a_pil_image_png_cannot_hold_is_converted():
    cmyk = Image.new("CMYK", (3, 2), (0, 255, 255, 0))  # red
    assert _decoded(_url(image_part(cmyk))).convert("RGB").getpixel((0, 0)) == (255, 0, 0)


def test_bytes_of_another_format_are_re_encoded_as_png_with_the_same_pixels():
    data = _encoded(picture(), "BMP")
    url = _url(image_part(data))
    assert url.startswith("data:image/png;base64,") and _same_pixels(_decoded(url), picture())


def test_paths_file_urls_and_data_urls_give_the_file_bytes(tmp_path):
    data = _encoded(picture(), "JPEG")
    path = tmp_path / "a picture.png"  # the name says png, the bytes are a JPEG: the bytes decide
    path.write_bytes(data)
    expected = "data:image/jpeg;base64," + base64.b64encode(data).decode()
    assert _url(image_part(path)) == _url(image_part(str(path))) == expected
    assert _url(image_part(path.as_uri())) == expected  # file:// URL, its space percent-encoded
    assert _url(image_part(expected)) == expected  # a canonical data URL is kept as it is
    bmp = "data:image/bmp;base64," + base64.b64encode(_encoded(picture(), "BMP")).decode()
    assert _same_pixels(_decoded(_url(image_part(bmp))), picture())  # another type is re-encoded
    assert _url(image_part("https://example.com/cat.png")) == "https://example.com/cat.png"  # never downloaded


def test_an_unreadable_or_non_image_file_is_refused_naming_the_path(tmp_path):
    missing = tmp_path / "screens" / "missing.png"
    with pytest.raises(ImageError, match="cannot read the image file .*missing.png"):
        image_part(missing)
    with pytest.raises(ImageError, match="cannot read the image file"):
        image_part(str(tmp_path))  # a folder
    text = tmp_path / "notes.png"
    text.write_text("not an image")
    with pytest.raises(ImageError, match=r"the file .*notes.png is not an image"):
        image_part(text)
    with pytest.raises(ImageError, match="cannot make an image of a int"):
        image_part(3)


# ---- messages -------------------------------------------------------------------------------------------------


def test_normalize_turns_every_image_form_into_data_url_parts(tmp_path):
    path = tmp_path / "p.png"
    path.write_bytes(_encoded(picture(colour=(1, 2, 3)), "PNG"))
    messages = [
        {"role": "system", "content": "You see images."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Which is red?"},
                {"type": "image", "image": picture()},
                {"type": "image", "path": str(path)},
                {"type": "image_url", "image_url": {"url": str(path), "detail": "low"}},
                {"type": "image_url", "image_url": "https://example.com/x.png"},
            ],
        },
    ]
    out = normalize_images(messages)
    assert out[0] is messages[0] and messages[1]["content"][1]["type"] == "image"  # the input is not changed
    parts = out[1]["content"]
    assert parts[0] == {"type": "text", "text": "Which is red?"}
    assert all(p["type"] == "image_url" for p in parts[1:])
    assert _url(parts[2]) == _url(parts[3]) == _url(image_part(path)) and parts[3]["image_url"]["detail"] == "low"
    assert parts[4] == {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}}
    assert json.loads(json.dumps(out)) == out  # JSON from here on
    assert normalize_images(out) is out  # canonical already: nothing copied, nothing encoded again
    local = [messages[0], {**messages[1], "content": messages[1]["content"][:4]}]  # no remote image: decodable
    decoded = message_images(local)
    assert [image.size for image in decoded] == [(5, 4)] * 3
    assert [
        _same_pixels(a, b) for a, b in zip(decoded, [picture(), *[picture(colour=(1, 2, 3))] * 2], strict=True)
    ] == [True] * 3
    assert has_images(messages) and has_images(out)


def test_text_only_messages_come_back_as_they_are():
    messages = [{"role": "user", "content": "hi"}, {"role": "user", "content": [{"type": "text", "text": "x"}]}]
    assert normalize_images(messages) is messages and not has_images(messages) and message_images(messages) == []


def test_in_place_normalisation_is_seen_by_every_holder_of_the_message():
    message = {"role": "user", "content": [{"type": "image", "image": picture()}]}
    history, recorded = [message], [message]
    assert normalize_images(history, in_place=True) is history
    assert _url(recorded[0]["content"][0]).startswith("data:image/png;base64,")


def test_remote_images_are_not_decoded():
    with pytest.raises(ImageError, match="rllm does not download images"):
        message_images([{"role": "user", "content": [image_part("http://example.com/a.png")]}])


def test_pil_images_in_observations_become_parts_and_nothing_else_changes():
    observation = {"board": picture(), "text": "turn 3", "history": [picture(colour=(0, 0, 0)), "x"]}
    encoded = encode_pil_images(observation)
    assert encoded["text"] == "turn 3" and encoded["history"][1] == "x"
    assert encoded["board"] == image_part(observation["board"]) and encoded["history"][0]["type"] == "image_url"
    plain = {"a": [1, {"b": "c"}]}
    assert encode_pil_images(plain) is plain


# ---- storage by hash ------------------------------------------------------------------------------------------


def _record_with(url: str) -> dict:
    message = {
        "role": "user",
        "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": url}}],
    }
    return {
        "step": 1,
        "episode": {"steps": [{"chat_completions": [message]}, {"chat_completions": [message]}], "observation": url},
    }


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_store_then_load_gives_the_same_strings_and_writes_each_image_once(tmp_path, fmt):
    url = _url(image_part(_encoded(picture(), fmt)))
    record = _record_with(url)
    stored = store_images(record, tmp_path / "images")
    assert "data:image" not in json.dumps(stored) and record == _record_with(url)  # a copy: the input is kept
    (name,) = [p.name for p in (tmp_path / "images").iterdir()]
    assert json.dumps(stored).count(IMAGE_REF_PREFIX + name) == 3  # three mentions, one file
    assert (tmp_path / "images" / name).read_bytes() == base64.b64decode(url.split(",", 1)[1])
    assert load_images(stored, tmp_path / "images") == record
    assert store_images(record, tmp_path / "images") == stored  # a second run of the same image writes nothing new
    assert len(list((tmp_path / "images").iterdir())) == 1


def test_a_data_url_that_would_not_round_trip_stays_inline(tmp_path):
    payload = base64.b64encode(_encoded(picture(), "PNG")).decode()
    wrapped = "data:image/png;base64," + payload[:20] + "\n" + payload[20:]  # MIME-style line break
    loose = "data:image/png;base64,AB=="  # decodes, but to bytes whose own encoding is AA==
    text = "a message that mentions data:image/png;base64,AAAA in passing"
    record = {"a": [wrapped, loose], "b": text, "c": "rllm-image:not-a-hash.png"}
    assert store_images(record, tmp_path / "images") == record and not (tmp_path / "images").exists()
    assert load_images(record, tmp_path / "images") == record


def test_a_missing_stored_image_is_an_error_naming_its_path(tmp_path):
    stored = store_images(_record_with(_url(image_part(picture()))), tmp_path / "images")
    (image,) = (tmp_path / "images").iterdir()
    image.unlink()
    with pytest.raises(ImageError, match=f"{image}.*images/ folder must stay"):
        load_images(stored, tmp_path / "images")


def test_an_interrupted_write_leaves_no_file_and_a_retry_writes_it(tmp_path, monkeypatch):
    url = _url(image_part(picture()))

    def killed(src, dst):
        raise OSError("killed before the rename")

    monkeypatch.setattr(os, "replace", killed)  # the rename that would make the image appear
    with pytest.raises(OSError, match="killed before the rename"):
        store_images({"u": url}, tmp_path / "images")
    assert list((tmp_path / "images").iterdir()) == []  # neither a torn image nor its temporary file
    monkeypatch.undo()
    stored = store_images({"u": url}, tmp_path / "images")
    assert load_images(stored, tmp_path / "images") == {"u": url}


# ---- the engine: an environment that returns images -----------------------------------------------------------


class PathAgent(BaseAgent):
    """Reads a str observation as the path of a screenshot."""

    def format_observation(self, observation):
        if isinstance(observation, str):
            return [{"type": "text", "text": "Next screen:"}, {"type": "image_url", "image_url": {"url": observation}}]
        return super().format_observation(observation)


def test_an_env_that_returns_pil_images_gives_a_json_episode_with_data_url_parts():
    model = FakeModel(script=["left", "right"])  # no tokenizer: the messages are the prompt, as a chat server gets
    engine = AgentExecutionEngine(agent_class=BaseAgent, env_class=PictureEnv, model=model, max_steps=3, env_workers=0)
    (episode,) = engine.execute_tasks([{"id": "pic"}])
    assert episode.termination_reason is TerminationReason.ENV_DONE
    sent = model.calls[1].prompt[:3]  # the agent's own list, which grew after the call
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    first, second = sent[0]["content"][0], sent[2]["content"][0]
    assert _same_pixels(_decoded(_url(first)), picture())
    assert _same_pixels(_decoded(_url(second)), picture(colour=(0, 0, 255)))
    steps = episode.trajectories[0].steps
    assert steps[1].chat_completions == sent  # what the model saw is what the step recorded
    assert steps[0].observation == image_part(picture(colour=(0, 0, 255)))
    assert Episode.model_validate(json.loads(json.dumps(episode.model_dump(mode="json")))) == episode


def test_an_unreadable_image_file_fails_the_episode_naming_the_path(tmp_path):
    missing = tmp_path / "shots" / "step1.png"
    engine = AgentExecutionEngine(
        agent_class=PathAgent,
        env_class=PictureEnv,
        model=FakeModel(script="ok"),
        max_steps=3,
        env_workers=0,
        retry_limit=1,
    )
    (episode,) = engine.execute_tasks([{"id": "pic", "path": str(missing)}])
    assert episode.termination_reason is TerminationReason.ERROR
    assert str(missing) in episode.info["error"] and "ImageError" in episode.info["error"]


def test_check_env_accepts_image_observations():
    report = check_env(PictureEnv, {"id": "pic"}, actions=["left"], n_episodes=2, warn_only=True)
    assert report.problems == [] and report.determinism_checked


# ---- a text-only model ----------------------------------------------------------------------------------------


def test_a_local_text_only_model_refuses_an_image_naming_the_model(smollm2_tokenizer):
    import asyncio

    from rllm.inference.model import LocalModel
    from rllm.models.registry import build_tiny_model

    messages = [{"role": "user", "content": [{"type": "text", "text": "What is it?"}, image_part(picture())]}]

    async def go():
        async with LocalModel(build_tiny_model(smollm2_tokenizer, seed=0), smollm2_tokenizer) as model:
            return await model.generate(messages)

    with pytest.raises(ImageError, match=f"the model '{smollm2_tokenizer.name_or_path}' is a text-only model"):
        asyncio.run(go())


def test_an_episode_whose_image_meets_a_text_only_model_ends_as_an_error_saying_why():
    from rllm.models.fake import FakeTokenizer

    engine = AgentExecutionEngine(
        agent_class=BaseAgent,
        env_class=PictureEnv,
        model=FakeModel(script="ok", tokenizer=FakeTokenizer()),
        env_workers=0,
    )
    (episode,) = engine.execute_tasks([{"id": "pic"}])
    assert episode.termination_reason is TerminationReason.ERROR and episode.info["error_site"] == "render"
    assert "FakeTokenizer" in episode.info["error"] and "images need a vision-language model" in episode.info["error"]
