"""The gateway (`rllm serve gateway`) and the viewer (`rllm view`) against hostile HTTP input, over real sockets: the
OpenAI SDK's null-content tool-call turn, non-finite and out-of-range sampling numbers, malformed bodies,
cross-site requests (Host, content type, API key), and damaged or hostile episode records. Every refusal is a JSON
answer naming what to change, never a 500 or a dropped connection."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request

import httpx
import pytest

openai = pytest.importorskip("openai")

from rllm.gateway.boundary import MAX_JSON_DEPTH, HostCheck, parse_json_body
from rllm.models.base import SamplingParams
from rllm.models.fake import FakeTokenizer
from rllm.runs import RunLog, write_json
from rllm.types import Episode, ModelOutput, Step, Trajectory
from rllm.viewer import start_server
from tests.support.gateway import CALL_TEXT, TOOLS, client, fake, serving

HI = [{"role": "user", "content": "hi"}]
JSON = {"Content-Type": "application/json"}


def strict_loads(text: str):
    """json.loads that refuses NaN/Infinity, as jq, browsers and strict parsers do."""

    def refuse(name: str):
        raise ValueError(f"bare {name} in the JSON")

    return json.loads(text, parse_constant=refuse)


def post(gateway, body: bytes | dict, *, sid: str = "s1", headers: dict | None = None) -> httpx.Response:
    url = gateway.session_url(sid) + "/chat/completions"
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    return httpx.post(url, content=body, headers={**JSON, **(headers or {})}, timeout=30)


# ---- the gateway: the SDK's tool-call turn ------------------------------------------------------------------------


def test_a_tool_call_turn_with_null_content_from_elsewhere_is_rendered_with_its_calls(shipped_tokenizer):
    """What the OpenAI SDK sends back for a tool-call turn (content None) that this session did not sample (another
    model's): rendered as empty content plus its calls, on a template that prints tool calls (Qwen) and on one that
    prints only content (SmolLM2, where the calls are written in the Hermes format the model was told to use)."""
    model = fake("The sum is 3.", tokenizer=shipped_tokenizer)
    call = {"id": "call_elsewhere", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
    turn = {"role": "assistant", "content": None, "refusal": None, "tool_calls": [call]}
    messages = [*HI, turn, {"role": "tool", "tool_call_id": "call_elsewhere", "content": "3"}]
    with serving(model) as gateway, client(gateway) as sdk:
        reply = sdk.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        prompt = shipped_tokenizer.decode(gateway.sessions["s1"].records[0].prompt_ids)
    assert reply.choices[0].message.content == "The sum is 3."
    assert CALL_TEXT in prompt and "\n3" in prompt.split(CALL_TEXT, 1)[1]  # the call, then its result


def test_null_content_is_refused_for_roles_that_must_have_text():
    with serving(fake("x")) as gateway:
        response = post(gateway, {"messages": [{"role": "user", "content": None}]})
    assert response.status_code == 400 and response.json()["error"]["param"] == "messages"
    assert "only an assistant message" in response.json()["error"]["message"]


# ---- the gateway: sampling numbers and the call log ---------------------------------------------------------------

BAD_NUMBERS = [
    ("temperature", "NaN"),
    ("top_p", "NaN"),
    ("temperature", "Infinity"),
    ("top_p", "-Infinity"),
    ("temperature", "1e999"),  # parses as inf
    ("temperature", "2.5"),
    ("top_p", "0"),
    ("top_k", "-3"),
    ("top_k", str(10**30)),
    ("seed", str(10**30)),
    ("max_tokens", str(10**30)),
    ("max_completion_tokens", "0"),
    ("n", str(10**30)),
    ("frequency_penalty", "NaN"),
    ("presence_penalty", "7"),
    ("top_logprobs", str(10**12)),
    ("logprobs", '"yes"'),
    ("stream", "1"),
]


def test_non_finite_and_out_of_range_sampling_numbers_are_400s_naming_the_field():
    model = fake("x")
    with serving(model) as gateway:
        answers = {}
        for field, literal in BAD_NUMBERS:
            body = b'{"messages": [{"role": "user", "content": "hi"}], "%s": %s}' % (field.encode(), literal.encode())
            response = post(gateway, body)
            answers[field, literal] = (response.status_code, strict_loads(response.text)["error"]["param"])
    assert answers == {(field, literal): (400, field) for field, literal in BAD_NUMBERS}
    assert model.calls == []  # nothing reached the model


def test_the_call_log_is_strict_json_when_the_model_returns_non_finite_logprobs():
    async def handler(messages, tools, overrides):
        output = await fake("ok").generate(messages, SamplingParams(**overrides))
        return output.model_copy(update={"logprobs": [math.nan, -math.inf, -0.5]})

    with serving() as gateway:
        gateway.open_session(handler, sid="t", tokenizer=FakeTokenizer())
        with client(gateway, "t") as sdk:
            reply = sdk.chat.completions.create(model="m", messages=HI, logprobs=True)
        text = httpx.get(gateway.base_url + "/sessions/t/calls").text
    [call] = strict_loads(text)["calls"]
    assert call["logprobs"] == ["NaN", "-Infinity", -0.5]  # the stated encoding, never bare NaN
    assert [entry.logprob for entry in reply.choices[0].logprobs.content] == [-9999.0, -9999.0, -0.5]


# ---- the gateway: malformed bodies --------------------------------------------------------------------------------


def test_malformed_bodies_are_400s_and_the_gateway_keeps_serving():
    deep = b'{"messages": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    nested = {"messages": HI, "metadata": json.loads("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))}
    bodies = {
        "lone surrogate": (b'{"messages": [{"role": "user", "content": "a\\ud800b"}]}', "lone UTF-16 surrogate"),
        "surrogate in a key": (b'{"messages": [{"role": "user", "content": "x", "\\udfff": 1}]}', "surrogate"),
        "200,000 deep": (deep, "nested too deep"),
        "65 deep": (json.dumps(nested).encode(), "nested too deep"),
        "not JSON": (b"{not json", "not valid JSON"),
        "not UTF-8": (b'{"messages": "\xff\xfe"}', "not valid JSON"),
        "a list": (b"[1, 2]", "must be a JSON object"),
        "tool_calls not a list": (
            b'{"messages": [{"role": "assistant", "content": null, "tool_calls": {"id": 1}}]}',
            "tool_calls must be a list",
        ),
    }
    with serving(fake(["ok"])) as gateway:
        answers = {name: post(gateway, body) for name, (body, _) in bodies.items()}
        assert post(gateway, {"messages": HI}).status_code == 200  # still serving
    for name, (_, message) in bodies.items():
        response = answers[name]
        assert response.status_code == 400, name
        assert message in strict_loads(response.text)["error"]["message"], name
    assert answers["lone surrogate"].json()["error"]["param"] == "messages"


def test_parse_json_body_names_the_path_of_what_is_wrong():
    with pytest.raises(ValueError, match=r"`messages\[0\].content` is nan"):
        parse_json_body(b'{"messages": [{"content": NaN}]}')
    assert parse_json_body(b'{"a": [{"b": "\\ud83d\\ude00"}]}') == {"a": [{"b": "\U0001f600"}]}  # a pair is fine


# ---- the gateway: cross-site requests -----------------------------------------------------------------------------


def test_cross_site_requests_are_refused():
    with serving(fake(["ok"] * 4), allowed_hosts=["gateway.internal"]) as gateway:
        port = gateway.port
        rebound = post(gateway, {"messages": HI}, headers={"Host": f"attacker.example:{port}"})
        as_text = post(gateway, {"messages": HI}, headers={"Content-Type": "text/plain"})
        as_form = post(gateway, {"messages": HI}, headers={"Content-Type": "application/x-www-form-urlencoded"})
        untyped = httpx.post(gateway.session_url("s1") + "/chat/completions", content=b'{"messages": []}')
        calls = httpx.get(gateway.base_url + "/sessions/s1/calls", headers={"Host": "attacker.example"})
        served = [
            post(gateway, {"messages": HI}, headers={"Host": host}).status_code
            for host in (f"localhost:{port}", f"127.0.0.1:{port}", "gateway.internal", "LOCALHOST.")
        ]
    assert (rebound.status_code, calls.status_code) == (403, 403)
    error = rebound.json()["error"]
    assert (error["type"], error["code"]) == ("permission_error", "host_not_allowed")
    assert "--allow-host" in error["message"]
    assert [r.status_code for r in (as_text, as_form, untyped)] == [415, 415, 415]
    assert "application/json" in as_text.json()["error"]["message"]
    assert served == [200, 200, 200, 200]


def test_the_api_key_is_checked_when_set():
    with serving(fake(["ok"] * 2), api_key="s3cret") as gateway:
        with client(gateway) as sdk, pytest.raises(openai.AuthenticationError, match="RLLM_GATEWAY_API_KEY"):
            sdk.chat.completions.create(model="m", messages=HI)
        keyed = openai.OpenAI(base_url=gateway.session_url("s1"), api_key="s3cret", max_retries=0)
        with keyed:
            assert keyed.chat.completions.create(model="m", messages=HI).choices[0].message.content == "ok"
        calls = httpx.get(gateway.base_url + "/sessions/s1/calls")
        health = httpx.get(gateway.base_url + "/health")
    assert calls.status_code == 401 and health.status_code == 200


def test_host_check_follows_the_bound_address():
    loopback = HostCheck("127.0.0.1")
    assert [loopback.refusal(h) for h in ("127.0.0.1:8090", "localhost", "[::1]:8090", None)] == [None] * 4
    assert loopback.refusal("evil.example:8090") and loopback.refusal("10.0.0.5")
    everywhere = HostCheck("0.0.0.0", ["proxy.lan"])
    assert everywhere.refusal("10.0.0.5:8090") is None and everywhere.refusal("[fe80::1]:80") is None
    assert everywhere.refusal("proxy.lan") is None and everywhere.refusal("evil.example")
    one = HostCheck("10.0.0.5")
    assert one.refusal("10.0.0.5:1") is None and one.refusal("10.0.0.6") and one.refusal("localhost")
    assert HostCheck("127.0.0.1", ["*"]).refusal("anything") is None


def test_rllm_serve_gateway_reads_the_api_key_and_allowed_hosts(monkeypatch):
    import argparse

    from rllm.cli import serve

    parser = argparse.ArgumentParser()
    serve.add_parser(parser.add_subparsers())
    args = parser.parse_args(["serve", "gateway", "--embedded", "x", "--allow-host", "a", "--allow-host", "b"])
    assert args.allow_host == ["a", "b"]
    monkeypatch.delenv("RLLM_GATEWAY_API_KEY", raising=False)
    assert serve.api_key_of(args) is None
    monkeypatch.setenv("RLLM_GATEWAY_API_KEY", "from-env")
    assert serve.api_key_of(args) == "from-env"
    args = parser.parse_args(["serve", "gateway", "--embedded", "x", "--api-key", "from-flag"])
    assert serve.api_key_of(args) == "from-flag"


# ---- the viewer ---------------------------------------------------------------------------------------------------

HOSTILE_URLS = [
    "javascript:alert(document.domain)",
    "data:text/html,<script>alert(1)</script>",
    "data:image/svg+xml,<svg onload=alert(1)>",
    "https://attacker.example/pixel.png",
    "/api/run/other/../../etc/passwd",
]
SHOWN_URL = "data:image/png;base64,iVBORw0KGgo="


def _hostile_run(tmp_path):
    """A run whose records a hostile or broken writer made: token ids no tokenizer has, image URLs that would run."""
    run = tmp_path / "hostile"
    run.mkdir()
    write_json(run / "manifest.json", {"kind": "eval", "model": "smollm2-135m-instruct"})
    log = RunLog(run)
    bad_ids = Step(model_output=ModelOutput(prompt_ids=[1, -5, 2], completion_ids=[10**12], logprobs=[-0.5]))
    log.log_episodes(0, [Episode(id="ids:0", trajectories=[Trajectory(steps=[bad_ids])])], "eval")
    parts = [{"type": "image_url", "image_url": {"url": url}} for url in [*HOSTILE_URLS, SHOWN_URL]]
    parts.append({"type": "image_url", "image_url": "javascript:void(0)"})  # the string form
    step = Step(chat_completions=[{"role": "user", "content": parts}], observation=parts[:2])
    log.log_episodes(0, [Episode(id="urls:0", trajectories=[Trajectory(steps=[step])])], "eval")
    return run


def _get(url: str, host: str | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, strict_loads(response.read().decode())
    except urllib.error.HTTPError as err:
        return err.code, strict_loads(err.read().decode())


def test_the_viewer_marks_out_of_range_token_ids_damaged_and_shows_no_hostile_url(tmp_path, smollm2_tokenizer):
    server = start_server([_hostile_run(tmp_path)], cache_dir=tmp_path / "cache")
    try:
        status, view = _get(server.url + "api/run/hostile/episode/1")
        assert status == 200, view
        assert "token id -5 at position 1 is outside the tokenizer's vocabulary" in view["damaged"]
        assert view["trajectories"][0]["overlay"]["rows"] == []
        assert "damaged record" in view["trajectories"][0]["overlay"]["error"]

        status, view = _get(server.url + "api/run/hostile/episode/2")
        assert status == 200, view
        shown = json.dumps(view["trajectories"])
        content = view["trajectories"][0]["turns"][0]["messages"][0]["content"]
        urls = [part["image_url"]["url"] for part in content if part["type"] == "image_url"]
        assert len(urls) == 1 and urls[0].startswith("/api/run/hostile/images/")  # the PNG, stored by the run log
        assert not any(url in shown for url in [*HOSTILE_URLS, "javascript:void"])
        assert "[image not shown: 'javascript:' URLs from a record are not displayed]" in shown
    finally:
        server.shutdown()


def test_only_the_runs_own_images_and_raster_data_urls_are_shown():
    from rllm.viewer.episode import shown_images

    own = "/api/run/r/images/" + "a" * 64 + ".png"
    parts = [{"type": "image_url", "image_url": {"url": url}} for url in [own, SHOWN_URL, *HOSTILE_URLS]]
    shown = shown_images([{"messages": [{"content": parts}]}], "/api/run/r/images/")[0]["messages"][0]["content"]
    assert shown[:2] == parts[:2] and {p["type"] for p in shown[2:]} == {"text"}


def test_the_viewer_answers_a_damaged_record_it_cannot_show_with_a_400(tmp_path):
    run = tmp_path / "broken"
    run.mkdir()
    write_json(run / "manifest.json", {"kind": "eval", "model": "none"})
    episode = Episode(id="e", trajectories=[Trajectory(steps=[Step(reward=1.0)])]).model_dump(mode="json")
    record = {"step": 0, "split": "eval", "episode": episode, "trained": 5}  # `trained` is a list per trajectory
    (run / "episodes.jsonl").write_text(json.dumps(record) + "\n")
    server = start_server([run], cache_dir=tmp_path / "cache")
    try:
        status, answer = _get(server.url + "api/run/broken/episode/1")
    finally:
        server.shutdown()
    assert status == 400 and answer["error"].startswith("line 1 of episodes.jsonl is damaged")


def test_the_viewer_checks_the_host_header(tmp_path):
    run = _hostile_run(tmp_path)
    server = start_server([run], cache_dir=tmp_path / "cache", allowed_hosts=["tunnel.lan"])
    try:
        port = server.server_address[1]
        rebound = _get(server.url + "api/runs", host=f"attacker.example:{port}")
        allowed = [_get(server.url + "api/runs", host=h)[0] for h in (f"localhost:{port}", "tunnel.lan")]
    finally:
        server.shutdown()
    assert rebound[0] == 403 and "DNS rebinding" in rebound[1]["error"]
    assert allowed == [200, 200]
