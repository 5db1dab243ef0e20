"""A loopback exporter that serves engine-style token counters growing at known rates, and a
real Prometheus (Debian's package) scraping it with the relabel rules plnt ships."""

from __future__ import annotations

import pathlib
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRAPE_CONFIG = REPO / "package" / "prometheus" / "prometheus-scrape-config.yaml"


@dataclass(frozen=True)
class Pod:
    """One simulated engine pod: what it exposes and the pod metadata discovery would see."""

    name: str
    namespace: str
    deployment: str | None  # the modelplane.ai/deployment label; None: no label
    engine: str  # vllm | sglang | tgi
    tokens_per_second: float
    port: int = 8000  # the container port discovery reports
    lag_seconds: float = 0.0  # >0: samples are stamped this far in the past


def exposition(pod: Pod, elapsed: float, now: float) -> str:
    """The /metrics text an engine of this kind would serve after `elapsed` seconds.

    Samples carry the time their value was computed, so the counter is exactly linear in its
    timestamps however late a scrape is handled on a busy machine.
    """
    total = pod.tokens_per_second * elapsed
    stamp = f" {int((now - pod.lag_seconds) * 1000)}"
    model = 'model_name="meta-llama/Llama-3.1-8B-Instruct"'
    if pod.engine == "vllm":
        return (
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n"
            "# TYPE vllm:generation_tokens_total counter\n"
            f"vllm:generation_tokens_total{{{model}}} {total!r}{stamp}\n"
            "# TYPE vllm:prompt_tokens_total counter\n"
            f"vllm:prompt_tokens_total{{{model}}} {3 * total!r}{stamp}\n"
        )
    if pod.engine == "sglang":
        return (
            "# HELP sglang:generation_tokens_total Number of generation tokens processed.\n"
            "# TYPE sglang:generation_tokens_total counter\n"
            f"sglang:generation_tokens_total{{{model}}} {total!r}{stamp}\n"
        )
    if pod.engine == "tgi":
        requests = int(elapsed * 2)  # two finished requests a second; only _sum matters
        return (
            "# TYPE tgi_request_generated_tokens histogram\n"
            f'tgi_request_generated_tokens_bucket{{le="64"}} 0{stamp}\n'
            f'tgi_request_generated_tokens_bucket{{le="+Inf"}} {requests}{stamp}\n'
            f"tgi_request_generated_tokens_sum {total!r}{stamp}\n"
            f"tgi_request_generated_tokens_count {requests}{stamp}\n"
        )
    raise ValueError(pod.engine)


class Exporter:
    """Serves /pods/<name>/metrics for each pod on one loopback port."""

    def __init__(self, pods: list[Pod]) -> None:
        self.pods = {p.name: p for p in pods}
        self.started = time.time()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = self.path.strip("/").split("/")
                pod = exporter.pods.get(parts[1]) if len(parts) == 3 else None
                if pod is None:
                    self.send_error(404)
                    return
                now = time.time()
                body = exposition(pod, now - exporter.started, now).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def target_groups(exporter: Exporter) -> list[dict]:
    """Static targets carrying the same __meta labels Kubernetes pod discovery would set, so
    the shipped relabel rules run unchanged."""
    groups = []
    for pod in exporter.pods.values():
        labels = {
            "__metrics_path__": f"/pods/{pod.name}/metrics",
            "__meta_kubernetes_namespace": pod.namespace,
            "__meta_kubernetes_pod_name": pod.name,
            "__meta_kubernetes_pod_container_port_number": str(pod.port),
            "__meta_kubernetes_pod_label_modelplane_ai_engine": pod.engine,
            "__meta_kubernetes_pod_labelpresent_modelplane_ai_deployment": str(
                pod.deployment is not None
            ).lower(),
        }
        if pod.deployment is not None:
            labels["__meta_kubernetes_pod_label_modelplane_ai_deployment"] = pod.deployment
        groups.append({"targets": [f"127.0.0.1:{exporter.port}"], "labels": labels})
    return groups


def prometheus_config(exporter: Exporter) -> dict:
    shipped = yaml.safe_load(SCRAPE_CONFIG.read_text())["scrape_configs"][0]
    job = {k: v for k, v in shipped.items() if k != "kubernetes_sd_configs"}
    job["scrape_interval"] = "1s"
    job["static_configs"] = target_groups(exporter)
    return {"global": {"scrape_interval": "1s"}, "scrape_configs": [job]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """A real Prometheus server on loopback with a temp config and data dir."""

    def __init__(self, config: dict, workdir: pathlib.Path) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("prometheus is not on PATH: run hack/install-prometheus.sh")
        workdir.mkdir(parents=True, exist_ok=True)
        cfg = workdir / "prometheus.yml"
        cfg.write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "prometheus.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={cfg}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=1h",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.wait(lambda: httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200, 30)

    def wait(self, check, seconds: float) -> None:
        """Poll `check` until it holds; fail with the server log after `seconds`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited:\n{self.log.read_text()[-3000:]}")
            try:
                if check():
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise TimeoutError(
            f"prometheus not there after {seconds}s:\n{self.log.read_text()[-3000:]}"
        )

    def query(self, promql: str) -> list[dict]:
        body = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5).json()
        assert body["status"] == "success", body
        return body["data"]["result"]

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
