"""Ray nodes on this machine: a head and more nodes, each its own ``ray start --block`` process with its
own raylet, as separate machines would run them. For the tests, the cluster benchmark, and trying
``--cluster`` on a laptop before a real cluster::

    with LocalCluster() as c:                  # a head of one CPU
      c.add_node(cpus=1)                       # a second node
      minicomp.compile(model, trials=64, cluster=c.address)

Every port is chosen free on 127.0.0.1 (two clusters can run side by side); the dashboard is off and each
node's object store small (candidates are kilobytes).
:meth:`LocalCluster.kill_raylet` kills one node's raylet with SIGKILL (a machine that dies); ``stop``
ends every process the nodes started. Linux only (raylets are found through ``/proc``).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from minicomp.errors import ClusterError

START_TIMEOUT_S = 60.0
OBJECT_STORE_BYTES = 80 * 1024 * 1024      # Ray's minimum is 75 MiB
READY = "Ray runtime started"              # what `ray start` prints when its node has joined


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@dataclass
class Node:
  proc: subprocess.Popen
  manager_port: int          # the raylet's port: how it is found and known to be ready
  log: Path


class LocalCluster:
  """A head node (``cpus`` CPUs) started at construction; :meth:`add_node` adds more. ``env``: variables
  for every node's processes (Ray's workers inherit them)."""

  def __init__(self, cpus: int = 1, env: dict[str, str] | None = None, gpus: int = 0,
               resources: dict[str, float] | None = None, node_env: dict[str, str] | None = None):
    self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0",
                # a dead node is noticed in about 2 s (Ray's default: 15 s or more)
                "RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "4", **(env or {})}
    self.logs = Path(tempfile.mkdtemp(prefix="minicomp-ray-"))
    self.port, self.client_port = free_port(), free_port()
    from ray._private.services import get_node_ip_address
    self.ip = get_node_ip_address()           # the address the nodes advertise (not always 127.0.0.1)
    self.nodes: list[Node] = []
    try:
      self._start(["--head", "--port", str(self.port), "--ray-client-server-port", str(self.client_port),
                   "--include-dashboard", "false"], cpus, gpus, resources, node_env)
    except BaseException:
      self.stop()
      raise

  @property
  def address(self) -> str:
    """The GCS address a driver on this machine connects to (``ray.init(address=...)``)."""
    return f"{self.ip}:{self.port}"

  @property
  def client_address(self) -> str:
    """The Ray Client address (``ray://``) a driver elsewhere connects to."""
    return f"ray://{self.ip}:{self.client_port}"

  def add_node(self, cpus: int = 1, gpus: int = 0, resources: dict[str, float] | None = None,
               env: dict[str, str] | None = None) -> Node:
    """Start one more node (``ray start --address``); ``resources`` such as ``{"sm_90": 1}``; ``env`` for its
    processes only."""
    return self._start(["--address", self.address], cpus, gpus, resources, env)

  def _start(self, args: list[str], cpus: int, gpus: int, resources, env) -> Node:
    ray = shutil.which("ray", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if ray is None: raise ClusterError("the `ray` command is not installed: pip install 'minicomp[cluster]'")
    port = free_port()
    log = self.logs / f"node{len(self.nodes)}.log"
    cmd = [ray, "start", "--block", *args, "--num-cpus", str(cpus), "--num-gpus", str(gpus),
           "--node-manager-port", str(port), "--object-store-memory", str(OBJECT_STORE_BYTES),
           "--disable-usage-stats"]
    if resources: cmd += ["--resources", json.dumps(resources)]
    proc = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env={**self.env, **(env or {})},
                            start_new_session=True)
    node = Node(proc, port, log)
    self.nodes.append(node)
    deadline = time.monotonic() + START_TIMEOUT_S
    while READY not in log.read_text(errors="replace"):   # printed once the node is registered
      if proc.poll() is not None or time.monotonic() > deadline:
        raise ClusterError(f"a local Ray node did not start ({'exited' if proc.poll() is not None else 'timed out'}); "
                           f"its log: {log}:\n{log.read_text()[-2000:]}")
      time.sleep(0.2)
    return node

  def raylet_pid(self, node: Node) -> int | None:
    """The pid of ``node``'s raylet (the process listening on its node-manager port), or None."""
    want = f"--node_manager_port={node.manager_port}"
    for d in Path("/proc").iterdir():
      if not d.name.isdigit(): continue
      try:
        argv = (d / "cmdline").read_bytes().split(b"\0")
      except OSError:
        continue
      if argv and argv[0].endswith(b"raylet") and want.encode() in argv: return int(d.name)
    return None

  def kill_raylet(self, node: Node) -> int:
    """Kill ``node``'s raylet with SIGKILL (its workers die with it, as when a machine goes down); its pid."""
    pid = self.raylet_pid(node)
    if pid is None: raise ClusterError(f"no raylet found for the node on port {node.manager_port}")
    os.kill(pid, signal.SIGKILL)
    return pid

  def stop(self) -> None:
    """Stop every node: SIGTERM to each node's process group, SIGKILL to what is left after 5 s."""
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
      live = [n for n in self.nodes if n.proc.poll() is None]
      for n in live:
        try:
          os.killpg(n.proc.pid, sig)
        except ProcessLookupError:
          pass
      deadline = time.monotonic() + wait_s
      while any(n.proc.poll() is None for n in live) and time.monotonic() < deadline: time.sleep(0.1)
    for n in self.nodes:               # processes a node started in its group (raylet, workers) go too
      try:
        os.killpg(n.proc.pid, signal.SIGKILL)
      except (ProcessLookupError, PermissionError):
        pass
    shutil.rmtree(self.logs, ignore_errors=True)

  def __enter__(self): return self
  def __exit__(self, *exc): self.stop()
