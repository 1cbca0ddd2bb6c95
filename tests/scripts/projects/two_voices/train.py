"""Two ranks take turns to print (rank 0, then rank 1, three rounds, 1.5 s apart, the last line of each
round on stderr): the merged console must interleave them in that order."""

import sys
import time

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
for i in range(3):
    for turn in (0, 1):
        if rank == turn:
            out = sys.stderr if turn == 1 and i == 2 else sys.stdout
            print(f"voice {turn} says {i}", file=out, flush=True)
        time.sleep(1.5)
        dist.barrier()
dist.destroy_process_group()
