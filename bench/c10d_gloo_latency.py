"""All-reduce latency of c10d's Gloo (Debian's python3-torch): 200 in-place sums of 40 and of
122,000 floats (the tutorial CNN's gradients) between the processes of one job, after 20
warm-up ones. The same engine dist's Gloo transport drives; compare bench/mpi_allreduce_latency.sh.

    for r in 0 1; do MASTER_ADDR=127.0.0.1 MASTER_PORT=7789 RANK=$r WORLD_SIZE=2 \\
      OMP_NUM_THREADS=1 /usr/bin/python3 bench/c10d_gloo_latency.py & done; wait

(on namespace hosts, prefix each with scripts/netns-cluster.sh exec HOST and set
GLOO_SOCKET_IFNAME=eth0 and MASTER_ADDR to host 0's address). Rank 0 prints microseconds per
all-reduce.
"""
import time

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    for count in (40, 122000):
        values = torch.zeros(count)
        for _ in range(20):
            dist.all_reduce(values)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(200):
            dist.all_reduce(values)
        took = (time.perf_counter() - start) / 200
        if dist.get_rank() == 0:
            print(f"c10d gloo, {count} floats: {took * 1e6:.1f} us per all-reduce", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
