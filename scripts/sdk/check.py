"""Runs the official Tinker Python SDK, unmodified, against a `gyre serve` at --url.

Every call a user of the SDK makes is tried once and printed as `ok` or `FAIL`, each
with its wall time; then the RL loop of the Loops RL page (group sampling under
asyncio.gather, group-normalized advantages with a std guard, 0.0 at prompt positions,
forward_backward("ppo"), optim_step, save_weights_and_get_sampling_client each step) on
arithmetic facts, reporting the mean reward of the first and last 10 steps.

The served model is gyre's embedded character-level model: token ids are
`ord(c) - 28` for printable ASCII, 3 for a newline, BOS 1, EOS 2 (see
src/backends/local/CharTokenizer.ts), so this script tokenizes by itself.

Usage: scripts/sdk/check.sh <sdk-folder> (it starts the server and runs this script).
Exit status: 0 when every check passed and the RL loop's reward rose by --min-rise.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
import urllib.request

import tinker
from tinker import types

BOS, EOS = 1, 2
RESULTS: list[tuple[str, bool, float, str]] = []


def encode(text: str) -> list[int]:
    return [3 if c == "\n" else ord(c) - 28 for c in text]


def decode(tokens: list[int]) -> str:
    return "".join("\n" if t == 3 else chr(t + 28) if 4 <= t < 99 else "" for t in tokens)


def prompt_of(text: str) -> types.ModelInput:
    return types.ModelInput.from_ints([BOS, *encode(text)])


def check(name: str):
    """Runs the decorated function now and records ok/FAIL with its time."""

    def run(fn):
        started = time.monotonic()
        try:
            detail = fn()
            if asyncio.iscoroutine(detail):
                detail = asyncio.run(detail)
            RESULTS.append((name, True, time.monotonic() - started, str(detail or "")))
            print(f"ok   {name} ({time.monotonic() - started:.2f}s) {detail or ''}", flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported, the script goes on
            RESULTS.append((name, False, time.monotonic() - started, f"{type(e).__name__}: {e}"))
            print(f"FAIL {name} ({time.monotonic() - started:.2f}s) {type(e).__name__}: {e}", flush=True)
            if os.environ.get("GYRE_SDK_TRACE"):
                traceback.print_exc()
        return fn

    return run


def expect_error(name: str, fn, must_contain: str, max_seconds: float = 1.0) -> None:
    """An error path: the SDK must raise (not hang) within max_seconds, naming must_contain."""

    @check(name)
    def _():
        started = time.monotonic()
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            took = time.monotonic() - started
            text = f"{type(e).__name__}: {e}"
            if must_contain.lower() not in text.lower():
                raise AssertionError(f"the error does not mention {must_contain!r}: {text[:300]}") from e
            if took > max_seconds:
                raise AssertionError(f"the error took {took:.2f}s to reach the caller (at most {max_seconds}s): {text[:200]}") from e
            return f"{type(e).__name__} in {took:.2f}s: {str(e)[:120]}"
        raise AssertionError("no error was raised")


def datum(prompt: list[int], completion: list[int], advantage: float, logprobs: list[float] | None = None) -> types.Datum:
    tokens = [*prompt, *completion]
    n = len(tokens) - 1
    weights = [0.0] * (len(prompt) - 1) + [1.0] * len(completion)
    inputs: dict = {"target_tokens": tokens[1:], "weights": weights}
    if logprobs is not None:
        inputs = {
            "target_tokens": tokens[1:],
            "logprobs": [0.0] * (len(prompt) - 1) + logprobs,
            "advantages": [0.0] * (len(prompt) - 1) + [advantage] * len(completion),
        }
    assert all(len(v) == n for v in inputs.values())
    return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=inputs)


def calls(service: tinker.ServiceClient, base_model: str, url: str) -> None:
    caps = {}

    @check("get_server_capabilities")
    def _():
        caps["v"] = service.get_server_capabilities()
        return [m.model_name for m in caps["v"].supported_models]

    clients = {}
    for rank in (4, 8):

        @check(f"create_lora_training_client rank {rank}")
        def _(rank=rank):
            clients[rank] = service.create_lora_training_client(base_model=base_model, rank=rank, seed=rank)
            info = clients[rank].get_info()
            assert info.lora_rank == rank, info
            return f"{info.model_id} rank {info.lora_rank}"

    tc = clients.get(8)
    if tc is None:
        return
    prompt = [BOS, *encode("What is 2 plus 3?")]
    completion = [*encode(" 5"), EOS]

    @check("forward_backward cross_entropy (weight 0 at prompt positions)")
    def _():
        out = tc.forward_backward([datum(prompt, completion, 0.0)], "cross_entropy").result()
        assert any(k.startswith("loss") for k in out.metrics), out.metrics
        assert len(out.loss_fn_outputs[0]["logprobs"].tolist()) == len(prompt) + len(completion) - 1
        return out.metrics

    @check("forward_backward ppo with loss_fn_config")
    def _():
        d = datum(prompt, completion, 1.0, [-2.0] * len(completion))
        out = tc.forward_backward([d, d], "ppo", loss_fn_config={"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}).result()
        return out.metrics

    @check("forward_backward importance_sampling")
    def _():
        out = tc.forward_backward([datum(prompt, completion, -0.5, [-1.5] * len(completion))], "importance_sampling").result()
        return out.metrics

    @check("forward")
    def _():
        out = tc.forward([datum(prompt, completion, 0.0)], "cross_entropy").result()
        return f"{len(out.loss_fn_outputs)} outputs"

    @check("optim_step")
    def _():
        return tc.optim_step(types.AdamParams(learning_rate=1e-3)).result().metrics

    paths = {}

    @check("save_state")
    def _():
        paths["state"] = tc.save_state("ckpt-1").result().path
        return paths["state"]

    @check("save_weights_for_sampler")
    def _():
        paths["sampler"] = tc.save_weights_for_sampler("sampler-1").result().path
        return paths["sampler"]

    @check("load_state")
    def _():
        tc.load_state(paths["state"]).result()

    @check("load_state_with_optimizer")
    def _():
        tc.load_state_with_optimizer(paths["state"]).result()

    sc = {}

    @check("save_weights_and_get_sampling_client")
    def _():
        sc["v"] = tc.save_weights_and_get_sampling_client()
        return type(sc["v"]).__name__

    @check("sample (num_samples, seed, stop)")
    def _():
        params = types.SamplingParams(max_tokens=6, temperature=1.0, seed=7, stop=[EOS])
        a = sc["v"].sample(prompt_of("What is 2 plus 3?"), num_samples=4, sampling_params=params).result()
        b = sc["v"].sample(prompt_of("What is 2 plus 3?"), num_samples=4, sampling_params=params).result()
        assert [s.tokens for s in a.sequences] == [s.tokens for s in b.sequences], "the same seed gave different samples"
        assert len(a.sequences) == 4 and all(s.logprobs is not None and len(s.logprobs) == len(s.tokens) for s in a.sequences)
        return [decode(s.tokens) for s in a.sequences]

    @check("compute_logprobs")
    def _():
        lp = sc["v"].compute_logprobs(prompt_of("What is 2 plus 3? 5")).result()
        assert lp[0] is None and all(isinstance(x, float) for x in lp[1:]), lp
        return f"{len(lp)} positions"

    @check("create_sampling_client from a saved sampler path")
    def _():
        s = service.create_sampling_client(model_path=paths["sampler"])
        return len(s.sample(prompt_of("What is 1 plus 1?"), 1, types.SamplingParams(max_tokens=4)).result().sequences)

    @check("create_training_client_from_state")
    def _():
        t2 = service.create_training_client_from_state(paths["state"])
        return t2.forward([datum(prompt, completion, 0.0)], "cross_entropy").result().metrics

    @check("create_training_client_from_state_with_optimizer")
    def _():
        t2 = service.create_training_client_from_state_with_optimizer(paths["state"])
        return t2.optim_step(types.AdamParams(learning_rate=1e-3)).result().metrics

    @check("_async variants (forward_backward_async, optim_step_async, sample_async)")
    def _():
        async def go():
            fb = await tc.forward_backward_async([datum(prompt, completion, 0.0)], "cross_entropy")
            out = await fb.result_async()
            op = await tc.optim_step_async(types.AdamParams(learning_rate=1e-3))
            await op.result_async()
            s = await sc["v"].sample_async(prompt_of("What is 3 plus 3?"), 2, types.SamplingParams(max_tokens=4))
            return f"{out.metrics} / {len(s.sequences)} samples"

        return asyncio.run(go())

    rest = service.create_rest_client()
    run_id = tc.model_id

    @check("rest: list_training_runs")
    def _():
        runs = rest.list_training_runs().result()
        assert any(r.training_run_id == run_id for r in runs.training_runs), [r.training_run_id for r in runs.training_runs]
        return f"{len(runs.training_runs)} runs"

    @check("rest: get_training_run")
    def _():
        r = rest.get_training_run(run_id).result()
        return f"{r.base_model} rank {r.lora_rank}, last checkpoint {r.last_checkpoint.tinker_path if r.last_checkpoint else None}"

    @check("rest: list_checkpoints")
    def _():
        cps = rest.list_checkpoints(run_id).result().checkpoints
        assert any(c.tinker_path == paths["state"] for c in cps), [c.tinker_path for c in cps]
        return [c.tinker_path for c in cps]

    @check("rest: list_user_checkpoints")
    def _():
        return f"{len(rest.list_user_checkpoints().result().checkpoints)} checkpoints"

    @check("rest: get_weights_info_by_tinker_path")
    def _():
        w = rest.get_weights_info_by_tinker_path(paths["state"]).result()
        assert w.lora_rank == 8, w
        return w

    @check("rest: checkpoint archive download is a tar of the adapter files")
    def _():
        url = rest.get_checkpoint_archive_url_from_tinker_path(paths["sampler"]).result().url
        with urllib.request.urlopen(url) as r:
            data = r.read()
        with tempfile.NamedTemporaryFile(suffix=".tar") as f:
            f.write(data)
            f.flush()
            with tarfile.open(f.name) as t:
                names = t.getnames()
        assert any(n.endswith("adapter_config.json") for n in names), names
        return names

    @check("tinker checkpoint download (the SDK's CLI)")
    def _():
        out = tempfile.mkdtemp()
        r = subprocess.run(
            [sys.executable, "-m", "tinker.cli", "checkpoint", "download", paths["sampler"], "--output", out],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "TINKER_BASE_URL": url},
        )
        assert r.returncode == 0, (r.stdout + r.stderr)[-600:]
        files = [os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs]
        assert any(f.endswith("adapter_config.json") for f in files), files
        return [os.path.relpath(f, out) for f in files]

    expect_error(
        "error: bad loss_fn_config",
        lambda: tc.forward_backward([datum(prompt, completion, 1.0, [-2.0] * len(completion))], "ppo", loss_fn_config={"nonsense": 1.0}).result(),
        "nonsense",
    )

    def mismatched():
        d = datum(prompt, completion, 0.0)
        d.loss_fn_inputs["weights"] = types.TensorData(data=[1.0, 1.0], dtype="float32", shape=[2])
        return tc.forward_backward([d], "cross_entropy").result()

    expect_error("error: mismatched tensor lengths", mismatched, "weights")

    @check("training continues after a refused call")
    def _():
        return tc.forward_backward([datum(prompt, completion, 0.0)], "cross_entropy").result().metrics

    def wrong_key():
        bad = tinker.ServiceClient(base_url=url, api_key="tml-wrong-key")
        return bad.create_lora_training_client(base_model=base_model, rank=4)

    if os.environ.get("GYRE_SDK_KEYED"):
        expect_error("error: wrong API key", wrong_key, "401", max_seconds=5.0)

    @check("create_lora_training_client train_mlp=False is honoured (weights_info says so)")
    def _():
        t = service.create_lora_training_client(base_model=base_model, rank=4, train_mlp=False)
        t.forward_backward([datum(prompt, completion, 0.0)], "cross_entropy").result()
        t.optim_step(types.AdamParams(learning_rate=1e-3)).result()
        path = t.save_state("attn-only").result().path
        w = rest.get_weights_info_by_tinker_path(path).result()
        assert w.train_mlp is False and w.train_attn is True, w
        return w

    expect_error(
        "error: train_attn=False and train_mlp=False together are refused by name",
        lambda: service.create_lora_training_client(base_model=base_model, rank=4, train_attn=False, train_mlp=False).get_info(),
        "train_attn",
    )


FACTS = [(a, b, op) for a in range(10) for b in range(10) for op in ("plus", "minus", "times")]


def answer(a: int, b: int, op: str) -> int:
    return a + b if op == "plus" else a - b if op == "minus" else a * b


def reward(text: str, a: int, b: int, op: str) -> float:
    """1 when the last number in the completion is the answer (as envs/math.ts scores it)."""
    numbers = re.findall(r"-?\d+", text)
    return 1.0 if numbers and int(numbers[-1]) == answer(a, b, op) else 0.0


async def rl_loop(service: tinker.ServiceClient, base_model: str, steps: int, groups: int, group_size: int, lr: float, seed: int, rank: int, facts: int) -> tuple[float, float, float]:
    tc = await service.create_lora_training_client_async(base_model=base_model, rank=rank, seed=seed)
    pool = random.Random(seed).sample(FACTS, min(facts, len(FACTS)))
    sampler = await tc.save_weights_and_get_sampling_client_async()
    params = types.SamplingParams(max_tokens=6, temperature=1.0, stop=[EOS])
    rng = random.Random(seed)
    means: list[float] = []
    step_times: list[float] = []
    for step in range(steps):
        started = time.monotonic()
        problems = [rng.choice(pool) for _ in range(groups)]
        prompts = [[BOS, *encode(f"What is {a} {op} {b}?")] for a, b, op in problems]
        results = await asyncio.gather(
            *(sampler.sample_async(types.ModelInput.from_ints(p), group_size, params) for p in prompts)
        )
        data: list[types.Datum] = []
        rewards: list[float] = []
        for (a, b, op), p, res in zip(problems, prompts, results):
            rs = [reward(decode(s.tokens), a, b, op) for s in res.sequences]
            rewards += rs
            mean = statistics.fmean(rs)
            std = statistics.pstdev(rs)
            if std < 1e-6:
                continue  # no signal in this group
            for s, r in zip(res.sequences, rs):
                data.append(datum(p, list(s.tokens), (r - mean) / (std + 1e-6), list(s.logprobs or [])))
        if data:
            fb = await tc.forward_backward_async(data, "ppo")
            op = await tc.optim_step_async(types.AdamParams(learning_rate=lr))
            await fb.result_async()
            await op.result_async()
        sampler = await tc.save_weights_and_get_sampling_client_async()
        means.append(statistics.fmean(rewards))
        step_times.append(time.monotonic() - started)
        if (step + 1) % 10 == 0:
            print(f"  rl step {step + 1}/{steps}: mean reward (last 10) {statistics.fmean(means[-10:]):.3f}, {statistics.fmean(step_times[-10:]):.2f}s/step", flush=True)
    return statistics.fmean(means[:10]), statistics.fmean(means[-10:]), statistics.median(step_times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-rise", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rank", type=int, default=8, help="LoRA rank of the RL loop's model (default 8, serve's own)")
    ap.add_argument("--facts", type=int, default=32, help="how many of the 300 single-digit facts the RL loop trains on (a seeded choice; default 32)")
    ap.add_argument("--skip-calls", action="store_true")
    ap.add_argument("--skip-rl", action="store_true")
    args = ap.parse_args()

    service = tinker.ServiceClient(base_url=args.url, api_key=os.environ.get("TINKER_API_KEY", "tml-gyre-local"))
    base_model = service.get_server_capabilities().supported_models[0].model_name
    print(f"tinker SDK {tinker.__version__} against {args.url} (base model {base_model})", flush=True)
    if not args.skip_calls:
        calls(service, base_model, args.url)
    ok = all(passed for _, passed, _, _ in RESULTS)
    if not args.skip_rl:

        @check(f"RL loop: {args.steps} steps x {args.groups} groups x {args.group_size} on {args.facts} facts, ppo, lr {args.lr}, rank {args.rank}")
        def _():
            first, last, step_time = asyncio.run(rl_loop(service, base_model, args.steps, args.groups, args.group_size, args.lr, args.seed, args.rank, args.facts))
            detail = f"mean reward steps 1-10 {first:.3f} -> last 10 {last:.3f} (rise {last - first:+.3f}); median step {step_time:.2f}s"
            if last - first < args.min_rise:
                raise AssertionError(f"{detail}: the rise is below {args.min_rise}")
            return detail

        ok = all(passed for _, passed, _, _ in RESULTS)
    failed = [name for name, passed, _, _ in RESULTS if not passed]
    print(f"\n{len(RESULTS) - len(failed)} of {len(RESULTS)} checks passed" + (f"; failed: {', '.join(failed)}" if failed else ""), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
