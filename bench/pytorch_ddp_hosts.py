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
      /usr/bin/python3 bench/pytorch_ddp_hosts.py [cnn|cnn-channels-last|mlp] [warmup=3] [steps=40] \
      [hook=none|fp16|bf16|powersgd:RANK[:START]]

HOOK registers one of PyTorch's DDP communication hooks (torch.distributed.algorithms.
ddp_comm_hooks) on the model, the peer of dist-train's --gradient-compression: fp16 and bf16
are default_hooks.fp16_compress_hook and bf16_compress_hook (each bucket cast, all-reduced, cast
back); powersgd:R[:START] is powerSGD_hook.powerSGD_hook with PowerSGDState(process_group=None,
matrix_approximation_rank=R, start_powerSGD_iter=START, use_error_feedback=True,
warm_start=True), START (plain all-reduce steps before PowerSGD starts) 10 when not given, as
dist-train's --gradient-compression powersgd:RANK, and raised to 2 when below: PyTorch refuses
start_powerSGD_iter <= 1 with error feedback or warm start. With powersgd the warm-up is at least START + 1 steps, so the first compressed step (which
allocates PowerSGD's matrices) is warm-up and the timed steps are all compressed. PyTorch 1.13's
gloo backend has no bfloat16 all-reduce ("Invalid scalar type"): bf16 fails there.

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

import os  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import openblas_core  # noqa: E402,F401  OPENBLAS_CORETYPE set before torch loads OpenBLAS
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from pytorch_ddp_cnn import make_step  # noqa: E402  (this directory: the same model and step)


def parse_hook(spec):
    """HOOK as (hook, state, name, start): hook None for none; start the PowerSGD START."""
    if spec == "none":
        return None, None, "none", 0
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    if spec == "fp16":
        return default_hooks.fp16_compress_hook, None, "fp16_compress_hook", 0
    if spec == "bf16":
        return default_hooks.bf16_compress_hook, None, "bf16_compress_hook", 0
    parts = spec.split(":")
    if parts[0] == "powersgd" and len(parts) in (2, 3) and all(p.isdigit() for p in parts[1:]):
        rank = int(parts[1])
        start = int(parts[2]) if len(parts) == 3 else 10  # dist-train's default
        if start < 2:
            print(f"powersgd: START {start} raised to 2 (PyTorch requires start_powerSGD_iter > 1 "
                  "with error feedback and warm start)", flush=True)
            start = 2
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=rank, start_powerSGD_iter=start,
            use_error_feedback=True, warm_start=True)
        return powerSGD_hook.powerSGD_hook, state, f"powerSGD_hook rank {rank} start {start}", start
    sys.exit(f"hook '{spec}': use none, fp16, bf16 or powersgd:RANK[:START]")


def make_hooked_step(model_name, world, hook, state):
    """make_step of bench/pytorch_ddp_cnn.py (the same model, seed order and step), with HOOK
    registered on the DistributedDataParallel it makes (its constructor is wrapped meanwhile)."""
    if hook is None:
        return make_step(model_name, world, distributed=True)
    ddp_class = torch.nn.parallel.DistributedDataParallel

    def hooked_ddp(module, *args, **kwargs):
        model = ddp_class(module, *args, **kwargs)
        model.register_comm_hook(state, hook)
        return model

    torch.nn.parallel.DistributedDataParallel = hooked_ddp
    try:
        return make_step(model_name, world, distributed=True)
    finally:
        torch.nn.parallel.DistributedDataParallel = ddp_class


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
    hook, state, hook_name, start = parse_hook(sys.argv[4] if len(sys.argv) > 4 else "none")
    warmup = max(warmup, start + 1) if start else warmup
    step = make_hooked_step(model_name, world, hook, state)

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
        label = model_name if hook is None else f"{model_name} ({hook_name})"
        print(f"ddp {label} {world}: {64 * world * steps / seconds:.1f} images/s steady "
              f"({steps} steps), start-up {startup:.1f} s", flush=True)
    # No teardown: the measurement is over, and once (in 7 runs of the CNN with powersgd:4:2 in
    # bench/hosts_scaling.sh's namespaces) both ranks hung after these lines, in
    # destroy_process_group or the interpreter's exit, until the bench's timeout.
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
