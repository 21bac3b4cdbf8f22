"""Resume across nodes: two `torchrun --nnodes 2` launches on localhost (static rendezvous on 127.0.0.1,
gloo), each node working in a folder of its own, as nodes with local disks do. Only rank 0 writes
checkpoints, so after a preemption node 1's run folder holds none; the resumed run must still go on from rank
0's checkpoint on both ranks (ablate/run/runner.py's ``agreed_resume``) and end where an uninterrupted
two-node run ends. Before it, rank 1 restarted from step 0 with its own weights while rank 0 resumed: the
replicas parted and the ranks disagreed about the end of training."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ablate.engine.checkpoint import load_checkpoint

pytestmark = [pytest.mark.soak,  # the soak tier, as the other torchrun tests
              pytest.mark.timeout(900)]

SPEC = """
name: nodes
seed: 1
data:
  source: synthetic
  synthetic: {task: reverse, vocab_size: 12, min_len: 2, max_len: 8, train_size: 400, val_size: 16,
              test_size: 8}
  max_len: 12
  batch_tokens: 64
model: {d_model: 32, heads: 2, encoder_layers: 1, decoder_layers: 1, d_ff: 64, dropout: 0.0}
train:
  max_steps: 300
  eval_every: 100
  checkpoint_every: 2
  schedule: {name: inverse_sqrt, warmup_steps: 4}
  optimizer: {lr: 0.003}
  threads: 1
eval: {samples: 0, bleu_during_training: false, decode: {strategy: greedy}}
tracking: {enabled: false}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch(spec: Path, nodes: list[Path]) -> list[subprocess.Popen[bytes]]:
    """One torchrun per node (one process each), started in the node's own folder (its `runs/`)."""
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    procs = []
    for rank, folder in enumerate(nodes):
        folder.mkdir(exist_ok=True)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
               f"--node_rank={rank}", "--master_addr=127.0.0.1", f"--master_port={port}",
               "-m", "ablate", "run", str(spec)]
        with open(folder / "out.txt", "ab") as out, open(folder / "err.txt", "ab") as err:
            procs.append(subprocess.Popen(cmd, cwd=folder, env=env, stdout=out, stderr=err))
    return procs


def finish(procs: list[subprocess.Popen[bytes]], nodes: list[Path], ok: bool = True) -> None:
    for proc, folder in zip(procs, nodes, strict=True):
        code = proc.wait(timeout=600)
        if ok:
            assert code == 0, f"{folder}: exit {code}\n{(folder / 'err.txt').read_text()[-5000:]}"


def checkpoint_step(folder: Path) -> int | None:
    found = list((folder / "runs" / "nodes").glob("*/last.pt"))
    try:
        return int(load_checkpoint(found[0])["state"]["step"]) if found else None
    except (FileNotFoundError, EOFError, RuntimeError):  # replaced between glob and open
        return None


def result(folder: Path) -> tuple[list[tuple[int, float]], dict[str, torch.Tensor]]:
    """(val/loss at each evaluation, the best checkpoint's weights) of the node's run."""
    (run_dir,) = (folder / "runs" / "nodes").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished"
    curve = [(int(step), float(metrics["val/loss"])) for step, metrics in summary["history"]]
    return curve, load_checkpoint(run_dir / "best.pt")["model"]


def test_a_run_preempted_on_two_nodes_resumes_from_rank_0s_checkpoint_on_both(tmp_path: Path) -> None:
    spec = tmp_path / "nodes.yaml"
    spec.write_text(SPEC)
    reference = [tmp_path / "ref0", tmp_path / "ref1"]
    finish(launch(spec, reference), reference)

    nodes = [tmp_path / "node0", tmp_path / "node1"]
    procs = launch(spec, nodes)
    deadline = time.time() + 600
    while (checkpoint_step(nodes[0]) or 0) < 6:
        assert time.time() < deadline and procs[0].poll() is None, (nodes[0] / "err.txt").read_text()
        time.sleep(0.02)
    procs[0].send_signal(signal.SIGTERM)  # node 0 preempted: every rank stops at the next step boundary
    finish(procs, nodes, ok=False)
    stopped = checkpoint_step(nodes[0])
    assert stopped is not None and 6 <= stopped < 300, stopped
    assert checkpoint_step(nodes[1]) is None  # only rank 0 writes checkpoints: node 1's folder has none

    finish(launch(spec, nodes), nodes)
    said = (nodes[1] / "err.txt").read_text()
    assert f"holds no checkpoint; resuming from rank 0's checkpoint at step {stopped}" in said, said
    ref_curve, ref_weights = result(reference[0])
    curve, weights = result(nodes[0])
    assert [s for s, _ in curve] == [s for s, _ in ref_curve] == [100, 200, 300]
    for (_, value), (_, expected) in zip(curve, ref_curve, strict=True):
        assert value == pytest.approx(expected, rel=1e-5), (curve, ref_curve)
    for name, tensor in ref_weights.items():
        assert torch.allclose(weights[name], tensor, rtol=1e-5, atol=1e-6), name
