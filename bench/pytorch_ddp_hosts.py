"""PyTorch peer of bench/hosts_scaling.sh: one DistributedDataParallel process on this host.

bench/pytorch_ddp_cnn.py starts all its processes itself on 127.0.0.1; across hosts each host
starts its own, so this one takes its place in the job from the environment, as torchrun does:
RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (GLOO_SOCKET_IFNAME picks the interface). THREADS
(default 1) intra-op threads. The model and the step are bench/pytorch_ddp_cnn.py's: the
tutorial CNN or the 784-4096-4096-10 MLP, 64 examples per process, Adam 1e-3, cross-entropy
averaged over the global batch (cnn-channels-last: the CNN in channels-last memory format, as
PyTorch's CPU tuning guide advises and as dist's reference CNN runs), the gloo backend (also
for WORLD_SIZE=1, so one host runs the same code as N).

    RANK=0 WORLD_SIZE=2 MASTER_ADDR=198.18.0.1 MASTER_PORT=7400 \
      /usr/bin/python3 bench/pytorch_ddp_hosts.py [cnn|cnn-channels-last|mlp] [warmup=3] [steps=40]

Timing: start-up (import, process group, DDP's first broadcast, the warm-up steps) is reported
apart; then a barrier, STEPS timed steps, a barrier. Bytes: eth0's tx_bytes of this host's
network namespace around the timed steps (both barriers inside), divided by STEPS. Every rank
prints one line "rank R: tx_bytes_per_step B"; rank 0 also prints
"ddp MODEL WORLD: X images/s steady (S steps), start-up Y s".
"""
import os
import sys
import time

T0 = time.perf_counter()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from pytorch_ddp_cnn import make_step  # noqa: E402  (this directory: the same model and step)


def tx_bytes():
    with open("/sys/class/net/eth0/statistics/tx_bytes") as f:
        return int(f.read())


def main():
    model_name = sys.argv[1] if len(sys.argv) > 1 else "cnn"
    warmup = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(int(os.environ.get("THREADS", "1")))
    torch.manual_seed(0)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    step = make_step(model_name, world, distributed=True)

    for _ in range(warmup):
        step()
    dist.barrier()
    startup = time.perf_counter() - T0
    tx0 = tx_bytes()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    dist.barrier()
    seconds = time.perf_counter() - start
    tx1 = tx_bytes()
    print(f"rank {rank}: tx_bytes_per_step {(tx1 - tx0) / steps:.0f}", flush=True)
    if rank == 0:
        print(f"ddp {model_name} {world}: {64 * world * steps / seconds:.1f} images/s steady "
              f"({steps} steps), start-up {startup:.1f} s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
