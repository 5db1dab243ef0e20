"""Runtime presets: how each serving runtime is launched to serve one model OpenAI-compatibly.

One table row per runtime: a pinned image, the launch command, the flags that name the
model, listen on port 8000 on every interface, shard it over ``resources.gpu`` GPUs (tensor
parallelism), and the runtime's own flag for each quantization it can serve. A missing
quantization entry means the runtime cannot serve that pair; :func:`engine_container`
refuses it naming both. Every runtime here answers readiness on ``/health``.

Flags, from each runtime's CLI reference:

- vLLM ``vllm serve MODEL``: ``--tensor-parallel-size``, ``--served-model-name``,
  ``--quantization fp8|awq|gptq``; fp16 is ``--dtype float16``.
- TGI ``text-generation-launcher``: ``--model-id``, ``--num-shard``, ``--quantize
  fp8|awq|gptq``; fp16 is ``--dtype float16``. Its Messages API (``/v1/chat/completions``)
  accepts any ``model`` value, so it needs no served name.
- SGLang ``python3 -m sglang.launch_server``: ``--model-path``, ``--tp-size``,
  ``--served-model-name``, ``--quantization fp8|awq|gptq``; fp16 is ``--dtype float16``.
- TensorRT-LLM ``trtllm-serve MODEL`` (PyTorch backend): ``--tp_size``,
  ``--served-model-name``. It has no quantization flag: it reads the quantization of a
  pre-quantized (ModelOpt) checkpoint, FP8 or INT4 AWQ; GPTQ checkpoints are not loadable
  by its PyTorch backend, so ``trt-llm`` + ``gptq-4bit`` is refused.
"""

from __future__ import annotations

import dataclasses

from plnt.xp import InvalidInput

PORT = 8000
HEALTH_PATH = "/health"


@dataclasses.dataclass(frozen=True)
class Preset:
    image: str
    command: tuple[str, ...]
    model_args: tuple[str, ...]  # "{model}" is the weights location, "{name}" the served name
    parallelism_flag: str
    quantization_args: dict[str, tuple[str, ...]]
    health_path: str = HEALTH_PATH


PRESETS: dict[str, Preset] = {
    "vllm": Preset(
        image="vllm/vllm-openai:v0.11.0",
        command=("vllm", "serve"),
        model_args=("{model}", "--served-model-name={name}", "--host=0.0.0.0", f"--port={PORT}"),
        parallelism_flag="--tensor-parallel-size",
        quantization_args={
            "fp16": ("--dtype=float16",),
            "fp8": ("--quantization=fp8",),
            "awq-4bit": ("--quantization=awq",),
            "gptq-4bit": ("--quantization=gptq",),
        },
    ),
    "tgi": Preset(
        image="ghcr.io/huggingface/text-generation-inference:3.3.6",
        command=("text-generation-launcher",),
        model_args=("--model-id={model}", "--hostname=0.0.0.0", f"--port={PORT}"),
        parallelism_flag="--num-shard",
        quantization_args={
            "fp16": ("--dtype=float16",),
            "fp8": ("--quantize=fp8",),
            "awq-4bit": ("--quantize=awq",),
            "gptq-4bit": ("--quantize=gptq",),
        },
    ),
    "sglang": Preset(
        image="lmsysorg/sglang:v0.5.4",
        command=("python3", "-m", "sglang.launch_server"),
        model_args=(
            "--model-path={model}",
            "--served-model-name={name}",
            "--host=0.0.0.0",
            f"--port={PORT}",
        ),
        parallelism_flag="--tp-size",
        quantization_args={
            "fp16": ("--dtype=float16",),
            "fp8": ("--quantization=fp8",),
            "awq-4bit": ("--quantization=awq",),
            "gptq-4bit": ("--quantization=gptq",),
        },
    ),
    "trt-llm": Preset(
        image="nvcr.io/nvidia/tensorrt-llm/release:1.3.0",
        command=("trtllm-serve",),
        model_args=(
            "{model}",
            "--served-model-name={name}",
            "--backend=pytorch",
            "--host=0.0.0.0",
            f"--port={PORT}",
        ),
        parallelism_flag="--tp_size",
        quantization_args={"fp16": (), "fp8": (), "awq-4bit": ()},
    ),
}


def preset_for(runtime: str, quantization: str) -> Preset:
    preset = PRESETS.get(runtime)
    if preset is None:
        raise InvalidInput(
            "spec.runtime", f"unknown runtime {runtime!r} (known: {', '.join(PRESETS)})"
        )
    if quantization not in preset.quantization_args:
        served = ", ".join(preset.quantization_args)
        raise InvalidInput(
            "spec.model.quantization",
            f"runtime {runtime} cannot serve quantization {quantization} (it serves: {served})",
        )
    return preset


def launch_args(preset: Preset, quantization: str, model: str, name: str, gpus: int) -> list[str]:
    """The engine's arguments: model, listener, tensor parallelism, quantization."""
    args = [a.format(model=model, name=name) for a in preset.model_args]
    args.append(f"{preset.parallelism_flag}={gpus}")
    args.extend(preset.quantization_args[quantization])
    return args
