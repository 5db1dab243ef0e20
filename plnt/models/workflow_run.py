"""WorkflowRun spec (plnt.work/v1), as its XRD states it.

Every default, bound, pattern and enum of the XRD is repeated here; the XRD's CEL rules
(replicas min <= max, the runtime/quantization pairs a runtime cannot serve) are checked by the
function itself (presets.py) so the messages name both values. Which gpuClass names exist is
not a schema question: the fleet's InferenceClasses decide (gpu_classes.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from plnt.models.base import NonNullSpecModel
from plnt.models.model_deployment import Failover

Runtime = Literal["vllm", "tgi", "trt-llm", "sglang"]
Quantization = Literal["fp16", "fp8", "awq-4bit", "gptq-4bit"]
STORAGE_URI_PATTERN = r"^(s3|gs|hf|https)://[^\s]+$"
MAX_GPUS = 8
MAX_REPLICAS = 64
MAX_MEMORY_GIB = 4096
# `<vendor domain>/<model>`, as in nvidia.com/h100: the shape of every built-in class and of
# a class an InferenceClass device declares.
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
GPU_CLASS_PATTERN = rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
GPU_CLASS_MAX_LENGTH = 63
DEFAULT_TRAFFIC_PERCENT = 5  # seed 000's lifecycle: "New canary at 5% traffic"


_Model = NonNullSpecModel


class ModelSource(_Model):
    name: str = Field(min_length=1, max_length=253)
    storage_uri: str | None = Field(
        default=None, alias="storageUri", max_length=2048, pattern=STORAGE_URI_PATTERN
    )
    quantization: Quantization = "fp16"


class Resources(_Model):
    gpu: int = Field(default=1, ge=1, le=MAX_GPUS)
    gpu_class: str = Field(
        alias="gpuClass", max_length=GPU_CLASS_MAX_LENGTH, pattern=GPU_CLASS_PATTERN
    )
    memory_gib: int = Field(default=64, alias="memoryGiB", ge=1, le=MAX_MEMORY_GIB)


class Replicas(_Model):
    min: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    max: int = Field(default=1, ge=1, le=MAX_REPLICAS)

    @model_validator(mode="after")
    def _ordered(self) -> Replicas:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must not exceed max ({self.max})")
        return self


class Autoscaling(_Model):
    target_tokens_per_second: int = Field(alias="targetTokensPerSecond", ge=1, le=10_000_000)


class SmokeTest(_Model):
    prompts: int = Field(default=10, ge=1, le=100)
    ttft_budget_ms: int = Field(default=500, alias="ttftBudgetMs", ge=1, le=600_000)
    tpot_budget_ms: int = Field(default=50, alias="tpotBudgetMs", ge=1, le=60_000)


class Canary(_Model):
    traffic_percent: int = Field(
        default=DEFAULT_TRAFFIC_PERCENT, alias="trafficPercent", ge=1, le=100
    )
    smoke_test: SmokeTest = Field(default_factory=SmokeTest, alias="smokeTest")


class WorkflowRunSpec(_Model):
    runtime: Runtime = "vllm"
    model: ModelSource
    resources: Resources
    replicas: Replicas = Field(default_factory=Replicas)
    autoscaling: Autoscaling | None = None
    canary: Canary = Field(default_factory=Canary)
    # passed to its ModelDeployment as it is
    failover: Failover = Field(default_factory=Failover)
