"""Golden protobuf fixtures of today's Tinker wire, made with the Tinker Python SDK's own code.

Usage:
    python scripts/sdk/golden.py <sdk-src-folder> [out-folder]

<sdk-src-folder> is the SDK's `src/` folder (or the checkout holding it); its Python
dependencies (numpy, protobuf, zstandard, ...) must be importable. The SDK's code is
used as it is, never copied. The output defaults
to test/backends/http/fixtures/proto/. For each fixture NAME it writes:

- NAME.json: the value in gyre's JSON wire shape (what gyre decodes the bytes to, and
  encodes back), the message type, and the SDK file the fixture exercises;
- NAME.bin: the message serialized deterministically (map entries sorted by key), the
  bytes gyre's encoder must produce;
- NAME.sdk.bin (requests only): the bytes the SDK itself sends (`SerializeToString()`,
  map entries in hash order), which gyre must decode;
- NAME.zst (one request): NAME.sdk.bin compressed as the SDK does when the client config
  says `proto_compress_fwdbwd`.

Requests go through `tinker.proto.request_conv.forward_backward_request_to_proto` (with
`forward_only` set as `tinker/resources/training.py` does). Responses are built the way
a server would and checked against `tinker.proto.response_conv`: the SDK must decode
each one to exactly the JSON value written beside it.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

MASK_LOGPROB = -99999.0  # tinker/types/sample_response.py


def setup(folder: Path) -> None:
    """Puts the SDK's src/ on the path; the SDK reads its own version from package
    metadata, so a checkout that is not installed gets a stand-in dist-info."""
    import importlib.metadata
    import re
    import tempfile

    src = folder / "src" if (folder / "src" / "tinker").is_dir() else folder
    if not (src / "tinker").is_dir():
        raise SystemExit(f"no tinker package under {folder}")
    sys.path.insert(0, str(src))
    try:
        importlib.metadata.version("tinker")
    except importlib.metadata.PackageNotFoundError:
        pyproject = src.parent / "pyproject.toml"
        match = re.search(r'^version = "([^"]+)"', pyproject.read_text(), re.M) if pyproject.is_file() else None
        version = match.group(1) if match else "0.0.0"
        meta = Path(tempfile.mkdtemp()) / f"tinker-{version}.dist-info"
        meta.mkdir()
        (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: tinker\nVersion: {version}\n")
        sys.path.insert(0, str(meta.parent))


def f32(x: float | None) -> float | None:
    import numpy as np

    return None if x is None else float(np.float32(x))


# ---------------------------------------------------------------------------
# requests: gyre's JSON shape -> SDK types -> request_conv


def tensor_json(t: dict) -> dict:
    out = dict(t)
    out["data"] = [int(v) for v in t["data"]] if t["dtype"] == "int64" else [f32(v) for v in t["data"]]
    return out


def sdk_tensor(t: dict):
    from tinker import types

    return types.TensorData(
        data=t["data"],
        dtype=t["dtype"],
        shape=t.get("shape"),
        sparse_crow_indices=t.get("sparse_crow_indices"),
        sparse_col_indices=t.get("sparse_col_indices"),
    )


def sdk_request(req: dict):
    from tinker import types

    fbi = req["forward_backward_input"]
    data = [
        types.Datum(
            model_input=types.ModelInput(chunks=[types.EncodedTextChunk(tokens=c["tokens"]) for c in d["model_input"]["chunks"]]),
            loss_fn_inputs={k: sdk_tensor(v) for k, v in d["loss_fn_inputs"].items()},
        )
        for d in fbi["data"]
    ]
    return types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(data=data, loss_fn=fbi["loss_fn"], loss_fn_config=fbi.get("loss_fn_config")),
        model_id=req["model_id"],
        seq_id=req["seq_id"],
    )


def request_json(req: dict) -> dict:
    fbi = req["forward_backward_input"]
    out_fbi = {
        "data": [
            {"model_input": d["model_input"], "loss_fn_inputs": {k: tensor_json(v) for k, v in d["loss_fn_inputs"].items()}}
            for d in fbi["data"]
        ],
        "loss_fn": fbi["loss_fn"],
    }
    if fbi.get("loss_fn_config"):
        out_fbi["loss_fn_config"] = {k: float(v) for k, v in fbi["loss_fn_config"].items()}
    return {"forward_backward_input": out_fbi, "model_id": req["model_id"], "seq_id": req["seq_id"], "forward_only": req["forward_only"]}


def text(tokens: list[int]) -> dict:
    return {"chunks": [{"type": "encoded_text", "tokens": tokens}]}


def rl_datum(prompt: list[int], completion: list[int], logprobs: list[float], advantage: float) -> dict:
    """A Datum as the Loops RL page builds it: 0.0 at prompt positions."""
    tokens = prompt + completion
    n = len(tokens) - 1
    p = len(prompt) - 1
    return {
        "model_input": text(tokens[:-1]),
        "loss_fn_inputs": {
            "target_tokens": {"data": tokens[1:], "dtype": "int64", "shape": [n]},
            "logprobs": {"data": [0.0] * p + logprobs, "dtype": "float32", "shape": [n]},
            "advantages": {"data": [0.0] * p + [advantage] * len(completion), "dtype": "float32", "shape": [n]},
        },
    }


def sft_datum(tokens: list[int], prompt_len: int) -> dict:
    n = len(tokens) - 1
    return {
        "model_input": text(tokens[:-1]),
        "loss_fn_inputs": {
            "target_tokens": {"data": tokens[1:], "dtype": "int64", "shape": [n]},
            "weights": {"data": [0.0] * (prompt_len - 1) + [1.0] * (n - prompt_len + 1), "dtype": "float32", "shape": [n]},
        },
    }


REQUESTS: dict[str, dict] = {
    "fb_ppo": {
        "forward_backward_input": {
            "data": [
                rl_datum([1, 17, 4, 9], [33, 2], [-0.25, -1.5], 0.75),
                rl_datum([1, 17, 5], [40, 41, 2], [-0.125, -2.0, -0.0625], -0.5),
                rl_datum([1, 300000, 6], [7], [-3.0], 0.0),
            ],
            "loss_fn": "ppo",
            "loss_fn_config": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
        },
        "model_id": "model-ppo",
        "seq_id": 3,
        "forward_only": False,
    },
    "fb_importance_sampling": {
        "forward_backward_input": {
            "data": [rl_datum([1, 2, 3], [4, 5], [-0.7, -0.3], 1.25), rl_datum([1, 2], [6], [-0.1], -1.25)],
            "loss_fn": "importance_sampling",
            "loss_fn_config": {"clip_ratio": 10.0},
        },
        "model_id": "model-is",
        "seq_id": 1,
        "forward_only": False,
    },
    "fb_cross_entropy": {
        "forward_backward_input": {
            "data": [sft_datum([1, 10, 11, 12, 13, 2], 3), sft_datum([1, 20, 21, 2], 2)],
            "loss_fn": "cross_entropy",
        },
        "model_id": "model-sft",
        "seq_id": 12,
        "forward_only": False,
    },
    "forward_only_cross_entropy": {
        "forward_backward_input": {"data": [sft_datum([1, 5, 6, 7], 2)], "loss_fn": "cross_entropy"},
        "model_id": "model-sft",
        "seq_id": 13,
        "forward_only": True,
    },
    "fb_sparse_weights": {
        "forward_backward_input": {
            "data": [
                {
                    "model_input": text([1, 2, 3, 4]),
                    "loss_fn_inputs": {
                        "target_tokens": {"data": [2, 3, 4, 5, 6, 7, 8, 9], "dtype": "int64", "shape": [2, 4]},
                        "weights": {
                            "data": [1.0, 0.5, 2.0],
                            "dtype": "float32",
                            "shape": [2, 4],
                            "sparse_crow_indices": [0, 1, 3],
                            "sparse_col_indices": [2, 0, 3],
                        },
                    },
                }
            ],
            "loss_fn": "cross_entropy",
        },
        "model_id": "model-sparse",
        "seq_id": 2,
        "forward_only": False,
    },
}


def write_request(out: Path, name: str, spec: dict) -> None:
    import zstandard
    from tinker.proto import request_conv, tinker_public_pb2 as pb

    msg = request_conv.forward_backward_request_to_proto(sdk_request(spec))
    msg.forward_only = spec["forward_only"]  # as tinker/resources/training.py does
    sent = msg.SerializeToString()
    canonical = msg.SerializeToString(deterministic=True)
    assert pb.ForwardBackwardRequest.FromString(sent) == pb.ForwardBackwardRequest.FromString(canonical)
    (out / f"{name}.sdk.bin").write_bytes(sent)
    (out / f"{name}.bin").write_bytes(canonical)
    if name == "fb_ppo":
        (out / f"{name}.zst").write_bytes(zstandard.ZstdCompressor().compress(sent))
    meta = {"message": "ForwardBackwardRequest", "sdk": "tinker/proto/request_conv.py (forward_backward_request_to_proto)", "json": request_json(spec)}
    (out / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")


def write_rejected(out: Path) -> None:
    """A request whose second datum has an image chunk: gyre must refuse it by name."""
    from tinker import types
    from tinker.proto import request_conv

    ok = types.Datum(model_input=types.ModelInput(chunks=[types.EncodedTextChunk(tokens=[1, 2])]), loss_fn_inputs={})
    image = types.Datum(
        model_input=types.ModelInput(chunks=[types.EncodedTextChunk(tokens=[1]), types.ImageChunk(data=b"\x89PNG", format="png")]),
        loss_fn_inputs={},
    )
    req = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(data=[ok, image], loss_fn="cross_entropy"), model_id="m", seq_id=1
    )
    (out / "fb_image_chunk.sdk.bin").write_bytes(request_conv.forward_backward_request_to_proto(req).SerializeToString())


# ---------------------------------------------------------------------------
# results: built as a server would, checked with response_conv


def batched_records(outputs: list[dict]) -> list:
    """loss_fn_outputs -> ArrayRecords: one BatchedTensor per field (byte offsets, the
    trailing shape), a new record where a field's dtype or trailing shape changes."""
    import numpy as np
    from tinker.proto import tinker_public_pb2 as pb

    dtypes = {"float32": (np.float32, pb.DTYPE_FLOAT32), "int64": (np.int64, pb.DTYPE_INT64)}
    signature = lambda d: tuple((k, t["dtype"], tuple(t["shape"][1:])) for k, t in sorted(d.items()))  # noqa: E731
    groups: list[list[dict]] = []
    for datum in outputs:
        if groups and signature(groups[-1][-1]) == signature(datum):
            groups[-1].append(datum)
        else:
            groups.append([datum])
    records = []
    for group in groups:
        record = pb.ArrayRecord(num_datums=len(group))
        for key in sorted(group[0]):
            np_dtype, proto_dtype = dtypes[group[0][key]["dtype"]]
            arrays = [np.asarray(d[key]["data"], dtype=np_dtype) for d in group]
            offsets = np.cumsum([0] + [a.nbytes for a in arrays]).astype(np.int64)
            bt = record.fields[key]
            bt.data = b"".join(a.tobytes() for a in arrays)
            bt.offsets = offsets.tobytes()
            bt.dtype = proto_dtype
            bt.trailing_shape.extend(group[0][key]["shape"][1:])
        records.append(record)
    return records


def fb_output_proto(value: dict):
    from tinker.proto import tinker_public_pb2 as pb

    msg = pb.ForwardBackwardOutput(loss_fn_output_type=value["loss_fn_output_type"])
    msg.loss_fn_outputs.extend(batched_records(value["loss_fn_outputs"]))
    for k, v in value["metrics"].items():
        msg.metrics[k] = v
    return msg


def check_fb_output(data: bytes, value: dict) -> None:
    from tinker.proto import response_conv

    got = response_conv.deserialize_forward_backward_output(data)
    assert got.loss_fn_output_type == value["loss_fn_output_type"], got.loss_fn_output_type
    assert got.metrics == value["metrics"], got.metrics
    assert len(got.loss_fn_outputs) == len(value["loss_fn_outputs"])
    for mine, theirs in zip(value["loss_fn_outputs"], got.loss_fn_outputs, strict=True):
        assert set(mine) == set(theirs), (set(mine), set(theirs))
        for key, t in mine.items():
            assert theirs[key].dtype == t["dtype"] and list(theirs[key].shape) == t["shape"], (key, theirs[key])
            assert theirs[key].tolist() == t["data"] or [x for row in theirs[key].tolist() for x in row] == t["data"], key


def out_tensor(data: list, dtype: str, shape: list[int] | None = None) -> dict:
    values = [int(v) for v in data] if dtype == "int64" else [f32(v) for v in data]
    return {"data": values, "dtype": dtype, "shape": shape if shape is not None else [len(values)]}


FB_OUTPUTS: dict[str, dict] = {
    "fb_output_cross_entropy": {
        "loss_fn_output_type": "ArrayRecord",
        "loss_fn_outputs": [
            {"logprobs": out_tensor([-0.5, -1.25, -0.1], "float32"), "elementwise_loss": out_tensor([0.0, 1.25, 0.1], "float32")},
            {"logprobs": out_tensor([-2.0], "float32"), "elementwise_loss": out_tensor([2.0], "float32")},
            {"logprobs": out_tensor([-0.3, -0.7], "float32"), "elementwise_loss": out_tensor([0.3, 0.0], "float32")},
        ],
        "metrics": {"loss:sum": 3.6500000059604645, "active_tokens:sum": 5.0, "clipped_fraction:mean": 0.0},
    },
    "fb_output_topk": {
        "loss_fn_output_type": "ArrayRecord",
        "loss_fn_outputs": [
            {"logprobs": out_tensor([-0.5, -1.0], "float32"), "topk_tokens": out_tensor([4, 5, 6, 7], "int64", [2, 2])},
            {"logprobs": out_tensor([-0.25], "float32"), "topk_tokens": out_tensor([8, 9], "int64", [1, 2])},
            {"logprobs": out_tensor([-0.75], "float32"), "topk_tokens": out_tensor([1, 2, 3], "int64", [1, 3])},
        ],
        "metrics": {"loss:mean": 0.625},
    },
    "fb_output_empty": {"loss_fn_output_type": "ArrayRecord", "loss_fn_outputs": [], "metrics": {"loss:sum": 0.0}},
}


def sample_proto(value: dict):
    import numpy as np
    from tinker.proto import tinker_public_pb2 as pb

    reasons = {"stop": pb.STOP_REASON_STOP, "length": pb.STOP_REASON_LENGTH}
    msg = pb.SampleResponse(prompt_cache_hit_tokens=value.get("prompt_cache_hit_tokens", 0))
    for s in value["sequences"]:
        seq = msg.sequences.add(stop_reason=reasons[s["stop_reason"]], tokens=np.asarray(s["tokens"], dtype=np.int32).tobytes())
        if s.get("logprobs") is not None:
            seq.logprobs = np.asarray(s["logprobs"], dtype=np.float32).tobytes()
    if value.get("prompt_logprobs") is not None:
        # tinker_public.proto: NaN for missing positions (e.g. the first prompt token)
        msg.prompt_logprobs = np.asarray([math.nan if x is None else x for x in value["prompt_logprobs"]], dtype=np.float32).tobytes()
    topk = value.get("topk_prompt_logprobs")
    if topk is not None:
        k = max([1] + [len(row) for row in topk if row is not None])
        ids = np.zeros((len(topk), k), dtype=np.int32)
        lps = np.full((len(topk), k), MASK_LOGPROB, dtype=np.float32)
        for i, row in enumerate(topk):
            for j, (token, lp) in enumerate(row or []):
                ids[i, j], lps[i, j] = token, lp
        msg.topk_prompt_logprobs.CopyFrom(pb.TopkPromptLogprobs(token_ids=ids.tobytes(), logprobs=lps.tobytes(), k=k, prompt_length=len(topk)))
    return msg


def check_sample(data: bytes, value: dict) -> None:
    from tinker.proto import response_conv

    got = response_conv.deserialize_sample_response(data)
    assert len(got.sequences) == len(value["sequences"])
    for mine, theirs in zip(value["sequences"], got.sequences, strict=True):
        assert theirs.stop_reason == mine["stop_reason"] and theirs.tokens == mine["tokens"], theirs
        assert theirs.logprobs == mine.get("logprobs"), (theirs.logprobs, mine.get("logprobs"))
    assert got.prompt_logprobs == value.get("prompt_logprobs"), got.prompt_logprobs
    topk = got.topk_prompt_logprobs
    assert (None if topk is None else [None if r is None else [list(p) for p in r] for r in topk]) == value.get("topk_prompt_logprobs"), topk
    assert got.prompt_cache_hit_tokens == value.get("prompt_cache_hit_tokens", 0)


SAMPLES: dict[str, dict] = {
    "sample_sequences": {
        "sequences": [
            {"stop_reason": "stop", "tokens": [11, 12, 2], "logprobs": [f32(-0.1), f32(-0.2), f32(-0.05)]},
            {"stop_reason": "length", "tokens": [13, 14, 15, 16], "logprobs": [f32(-1.5), f32(-0.5), f32(-2.25), f32(-0.75)]},
            {"stop_reason": "stop", "tokens": [2], "logprobs": [f32(-3.0)]},
        ],
    },
    "sample_prompt_logprobs": {
        "sequences": [{"stop_reason": "length", "tokens": [7], "logprobs": [f32(-0.9)]}],
        "prompt_logprobs": [None, f32(-2.5), f32(-0.3), f32(-7.125)],
        "prompt_cache_hit_tokens": 2,
    },
    "sample_topk": {
        "sequences": [{"stop_reason": "stop", "tokens": [5, 2]}],
        "prompt_logprobs": [None, f32(-1.0), f32(-0.5)],
        "topk_prompt_logprobs": [None, [[3, f32(-0.2)], [4, f32(-1.9)]], [[9, f32(-0.5)]]],
    },
}


def main() -> None:
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    setup(Path(sys.argv[1]))
    out = Path(sys.argv[2]) if len(sys.argv) == 3 else Path(__file__).resolve().parents[2] / "test/backends/http/fixtures/proto"
    out.mkdir(parents=True, exist_ok=True)
    for name, spec in REQUESTS.items():
        write_request(out, name, spec)
    write_rejected(out)
    for name, value in FB_OUTPUTS.items():
        data = fb_output_proto(value).SerializeToString(deterministic=True)
        check_fb_output(data, value)
        (out / f"{name}.bin").write_bytes(data)
        meta = {"message": "ForwardBackwardOutput", "sdk": "tinker/proto/response_conv.py (deserialize_forward_backward_output)", "json": value}
        (out / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")
    for name, value in SAMPLES.items():
        data = sample_proto(value).SerializeToString(deterministic=True)
        check_sample(data, value)
        (out / f"{name}.bin").write_bytes(data)
        meta = {"message": "SampleResponse", "sdk": "tinker/proto/response_conv.py (deserialize_sample_response), tinker/types/sample_response.py", "json": value}
        (out / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {len(REQUESTS) + len(FB_OUTPUTS) + len(SAMPLES) + 1} fixtures to {out}")


if __name__ == "__main__":
    main()
