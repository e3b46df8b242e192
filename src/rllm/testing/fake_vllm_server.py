"""A fake vLLM server for weight-sync tests: `FakeOpenAIServer` plus the vLLM endpoints rllm's weight sync calls,
over a real tiny transformers model whose weights those endpoints really swap.

- `POST /pause?mode=`, `POST /resume`, `GET /is_paused`, `POST /update_weight_version`, `GET /weight_info`, `GET
  /health`;
- `POST /collective_rpc` with `reload_weights(weights_path=...)`: reads the folder's safetensors into the model and,
  like vLLM, needs the whole model (a weight missing from the folder is an HTTP 500);
- `POST /v1/load_lora_adapter` / `unload_lora_adapter`: a peft adapter applied on top of the weights, served under
  its name (listed by `/v1/models`, accepted as a request's `model`);
- `/v1/completions` with `prompt_logprobs: 0` answers vLLM-shaped prompt logprobs computed by the current weights
  (or the named adapter), so the post-sync logprob check is a real comparison. Sampled completions stay scripted.

`events` records the admin calls in order, for asserting pause → swap → version → resume. `fail_next` makes the next
admin call of that name answer HTTP 500; `corrupt_reloads` adds noise to every reloaded weight (a server that did
not get the trainer's weights).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from aiohttp import web

from rllm.testing.fake_openai_server import FakeOpenAIServer, _error

__all__ = ["FakeVLLMServer"]


class FakeVLLMServer(FakeOpenAIServer):
    def __init__(self, model_dir: str | Path, *, model: str = "policy", **kwargs: Any) -> None:
        from transformers import AutoModelForCausalLM

        super().__init__(model=model, **kwargs)
        self.weights = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
        self.events: list[tuple] = []
        self.paused = False
        self.version: str | None = None
        self.adapters: dict[str, Any] = {}  # name -> the model with that adapter applied
        self.fail_next: str | None = None
        self.corrupt_reloads = False

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def make_app(self) -> web.Application:
        app = super().make_app()
        app.router.add_get("/health", self._health)
        app.router.add_post("/pause", self._pause)
        app.router.add_post("/resume", self._admin("resume", lambda body: self._set_paused(False)))
        app.router.add_get("/is_paused", self._is_paused)
        app.router.add_post("/collective_rpc", self._admin("collective_rpc", self._collective_rpc))
        app.router.add_post("/update_weight_version", self._admin("version", self._set_version))
        app.router.add_get("/weight_info", self._weight_info)
        app.router.add_post("/v1/load_lora_adapter", self._admin("load_lora", self._load_lora))
        app.router.add_post("/v1/unload_lora_adapter", self._admin("unload_lora", self._unload_lora))
        return app

    # ---- admin ---------------------------------------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response()

    async def _is_paused(self, request: web.Request) -> web.Response:
        return web.json_response({"is_paused": self.paused})

    async def _weight_info(self, request: web.Request) -> web.Response:
        return web.json_response({"weight_version": self.version})

    async def _pause(self, request: web.Request) -> web.Response:
        self.events.append(("pause", request.query.get("mode", "abort")))
        self.paused = True
        return web.json_response({"status": "paused"})

    def _admin(self, name: str, apply):
        async def handler(request: web.Request) -> web.Response:
            body = await request.json() if request.can_read_body else {}
            if self.fail_next == name:
                self.fail_next = None
                self.events.append((name, "failed"))
                return _error(500, f"{name} failed (injected)")
            try:
                result = apply(body)
            except (KeyError, ValueError, OSError) as exc:
                return _error(500, f"{name}: {exc}")
            return web.json_response(result if result is not None else {})

        return handler

    def _set_paused(self, paused: bool) -> None:
        self.paused = paused
        self.events.append(("resume",))

    def _set_version(self, body: dict) -> dict:
        self.version = body["new_version"]
        self.events.append(("version", self.version))
        return {"success": True, "new_version": self.version}

    def _collective_rpc(self, body: dict) -> dict:
        if body.get("method") != "reload_weights":
            raise ValueError(f"method {body.get('method')!r} is not faked")
        import torch
        from safetensors.torch import load_file

        path = Path(body["kwargs"]["weights_path"])
        state: dict = {}
        for file in sorted(path.glob("*.safetensors")):
            state.update(load_file(str(file)))
        expected = {n for n in self.weights.state_dict() if not (n == "lm_head.weight" and _tied(self.weights))}
        missing = expected - set(state)
        if missing:
            raise ValueError(f"the reload folder lacks {len(missing)} weights, e.g. {min(missing)}")
        if self.corrupt_reloads:
            state = {name: tensor + 0.5 * torch.randn_like(tensor) for name, tensor in state.items()}
        self.weights.load_state_dict(state, strict=False)
        self.events.append(("reload", str(path)))
        return {"results": [None]}

    def _load_lora(self, body: dict) -> str:
        from peft import PeftModel

        name, path = body["lora_name"], body["lora_path"]
        self.adapters[name] = PeftModel.from_pretrained(copy.deepcopy(self.weights), path).eval()
        self.events.append(("load_lora", name))
        return f"Success: LoRA adapter '{name}' added successfully."

    def _unload_lora(self, body: dict) -> str:
        name = body["lora_name"]
        if name not in self.adapters:
            raise KeyError(f"adapter {name!r} is not loaded")
        del self.adapters[name]
        self.events.append(("unload_lora", name))
        return f"Success: LoRA adapter '{name}' removed successfully."

    # ---- model requests ------------------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        cards = [
            {"id": name, "object": "model", "created": 0, "owned_by": "rllm-fake"}
            for name in (self.model, *self.adapters)
        ]
        return web.json_response({"object": "list", "data": cards})

    def _validate(self, body: dict[str, Any]) -> web.Response | None:
        if body.get("model") in self.adapters:
            body = {**body, "model": self.model}
        return super()._validate(body)

    def _completion_body(self, body: dict[str, Any]) -> dict[str, Any]:
        result = super()._completion_body(body)
        if body.get("prompt_logprobs") is not None:
            model = self.adapters.get(body.get("model"), self.weights)
            result["choices"][0]["prompt_logprobs"] = _prompt_logprobs(model, list(body["prompt"]))
        return result


def _tied(model: Any) -> bool:
    return bool(getattr(model.config, "tie_word_embeddings", False))


def _prompt_logprobs(model: Any, ids: list[int]) -> list[dict | None]:
    import torch

    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
    values = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()
    return [None] + [
        {str(t): {"logprob": v, "rank": 1, "decoded_token": ""}} for t, v in zip(ids[1:], values, strict=True)
    ]
