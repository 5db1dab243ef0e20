"""Generated tokens per second per ModelDeployment, from a Prometheus-compatible query API.

Each engine names its generation-token counter differently (see ENGINE_COUNTERS); the scrape
config shipped in package/prometheus/ copies the pod labels onto every series as
`modelplane_deployment` and `namespace`. One instant query per interval sums the per-pod rates
by those two labels for every deployment at once; a second query reports the age of each
deployment's newest sample, so a deployment whose series stopped updating reads as stale
rather than as a low rate. Any failure to query reads as "failed" for every deployment: the
decision then keeps the current count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import httpx

from plnt_reconciler.decision import MetricsStatus, Observation

DEPLOYMENT_LABEL = "modelplane_deployment"
NAMESPACE_LABEL = "namespace"

# The monotonic count of generated (output) tokens, per engine.
ENGINE_COUNTERS = {
    "vllm": "vllm:generation_tokens_total",  # counter
    "sglang": "sglang:generation_tokens_total",  # counter
    # TGI only has a per-request histogram of generated tokens; its _sum is the running total
    # (it grows when a request finishes, so the rate lags streaming by one request's length).
    "tgi": "tgi_request_generated_tokens_sum",
}

Key = tuple[str, str]  # (namespace, name)


def _per_engine(template: str) -> str:
    selector = f'{{{DEPLOYMENT_LABEL}!=""}}'
    return " or ".join(template.format(series=f"{m}{selector}") for m in ENGINE_COUNTERS.values())


def rate_query(window: str) -> str:
    """PromQL: generated tokens per second, summed over a deployment's pods and engines.

    `or` (not a __name__ regex) keeps two engines' series apart even if they share labels.
    """
    inner = _per_engine(f"rate({{series}}[{window}])")
    return f"sum by ({NAMESPACE_LABEL}, {DEPLOYMENT_LABEL}) ({inner})"


def age_query() -> str:
    """PromQL: seconds since the newest sample of the stalest series of each deployment."""
    inner = _per_engine("time() - timestamp({series})")
    return f"max by ({NAMESPACE_LABEL}, {DEPLOYMENT_LABEL}) ({inner})"


class QueryError(Exception):
    pass


@dataclass(frozen=True)
class Readings:
    """One interval's view of every deployment's token rate."""

    rates: dict[Key, float] = field(default_factory=dict)
    ages: dict[Key, float] = field(default_factory=dict)
    error: str = ""
    stale_after: float = 120.0

    def observation(self, key: Key) -> Observation:
        if self.error:
            return Observation(MetricsStatus.FAILED, detail=self.error)
        rate = self.rates.get(key)
        if rate is None:
            return Observation(
                MetricsStatus.MISSING,
                detail=f"no generation-token series with namespace={key[0]} "
                f"{DEPLOYMENT_LABEL}={key[1]}",
            )
        age = self.ages.get(key)
        if age is not None and age > self.stale_after:
            return Observation(
                MetricsStatus.STALE,
                rate,
                f"newest sample is {age:.0f}s old (more than {self.stale_after:g}s)",
            )
        return Observation.ok(rate)


class Prometheus:
    """A small client for the Prometheus HTTP API's instant queries."""

    def __init__(
        self,
        url: str,
        *,
        rate_window: str = "2m",
        stale_after: float = 120.0,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.rate_window = rate_window
        self.stale_after = stale_after
        self._http = httpx.Client(timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def query(self, promql: str) -> dict[Key, float]:
        """Run an instant query whose series carry namespace and deployment labels."""
        try:
            response = self._http.get(f"{self.url}/api/v1/query", params={"query": promql})
        except httpx.HTTPError as err:
            raise QueryError(f"{type(err).__name__}: {err}") from err
        try:
            body = response.json()
        except ValueError as err:
            raise QueryError(f"HTTP {response.status_code}: not JSON") from err
        if response.status_code != 200 or body.get("status") != "success":
            why = f"{body.get('errorType', '')} {body.get('error', '')}".strip()
            raise QueryError(f"HTTP {response.status_code}: {why}")
        data = body.get("data") or {}
        if data.get("resultType") != "vector":
            raise QueryError(f"expected a vector result, got {data.get('resultType')!r}")
        values: dict[Key, float] = {}
        for sample in data.get("result", []):
            labels = sample.get("metric", {})
            name, namespace = labels.get(DEPLOYMENT_LABEL), labels.get(NAMESPACE_LABEL)
            value = float(sample["value"][1])
            if name and namespace and not math.isnan(value):
                values[(namespace, name)] = value
        return values

    def read(self) -> Readings:
        """Rates and sample ages for every deployment; a failed query fails them all."""
        try:
            rates = self.query(rate_query(self.rate_window))
            ages = self.query(age_query())
        except QueryError as err:
            return Readings(error=str(err), stale_after=self.stale_after)
        return Readings(rates, ages, stale_after=self.stale_after)
