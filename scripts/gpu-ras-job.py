"""A two-rank torch job for scripts/gpu-ras*.sh: three all-reduces, then
`ready.RANK` in WORK; on `behind`, rank 0 starts a fourth, which waits for
rank 1 (asleep until `end`); on `end`, rank 1 joins it and each writes
`done.RANK`. One GPU: each rank its own host to NCCL (NCCL_HOSTID).

  RANK=r LOCAL_RANK=r WORLD_SIZE=2 MASTER_ADDR=… MASTER_PORT=… python gpu-ras-job.py WORK
"""
import os, sys, time, torch, torch.distributed as d
work = sys.argv[1]
gpus, local = torch.cuda.device_count(), int(os.environ["LOCAL_RANK"])
if gpus < 2:
    os.environ["NCCL_HOSTID"] = f"ras-host-{local}"
torch.cuda.set_device(local % gpus)
d.init_process_group("nccl")
r = d.get_rank()
open(f"{work}/pid.{r}", "w").write(str(os.getpid()))
x = torch.ones(1 << 20, device="cuda")
for _ in range(3):
    d.all_reduce(x)
torch.cuda.synchronize()
open(f"{work}/ready.{r}", "w").write("3")
def wait_for(name):
    while not os.path.exists(f"{work}/{name}"):
        time.sleep(0.2)
wait_for("behind")
if r == 0:
    d.all_reduce(x)
    open(f"{work}/launched.0", "w").write("4")
wait_for("end")
if r == 1:
    d.all_reduce(x)
torch.cuda.synchronize()
open(f"{work}/done.{r}", "w").write("ok")
