# Which DeepSpeed or torch call changes the device memory a rank holds outside torch's caching allocator
# ((total - free) - torch.cuda.memory_reserved()) by more than 8 MiB, or its resident set (VmRSS) by more than 64 MiB: every method of DeepSpeed's engine and ZeRO-3
# classes, torch.distributed's collectives and torch.isinf/isnan wrapped, then bench/deepspeed/ds_peer.py run under
# them with the same arguments (torchrun --nproc_per_node=1 probe_outside_allocator.py ARGS-OF-ds_peer.py). Lines
# "PROBE rank R <indent><call>: outside A -> B MiB" (or "host A -> B MiB"), nested calls indented; the innermost is the one that did it. The wrappers
# cost host time: the step times of such a run mean nothing.

import inspect, os, runpy, sys, torch, torch.distributed as tdist
import deepspeed
from deepspeed.runtime.zero import stage3, partitioned_param_coordinator, parameter_offload, partition_parameters
from deepspeed.runtime import engine as ds_engine
MIB = 2.0**20
depth = [0]
RANK = os.environ.get("RANK", "0")
def outside():
    free, total = torch.cuda.mem_get_info()
    return (total - free) - torch.cuda.memory_reserved()
def resident():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0
def wrap(fn, label):
    def w(*a, **k):
        before, host_before = outside(), resident(); depth[0] += 1
        try:
            return fn(*a, **k)
        finally:
            depth[0] -= 1
            after, host_after = outside(), resident()
            lead = f"PROBE rank {RANK} {'  ' * depth[0]}{label}:"
            if abs(after - before) > 8 * MIB:
                print(f"{lead} outside {before / MIB:.1f} -> {after / MIB:.1f} MiB", flush=True)
            if abs(host_after - host_before) > 64 * MIB:
                print(f"{lead} host {host_before / MIB:.1f} -> {host_after / MIB:.1f} MiB", flush=True)
    w.__wrapped__ = fn
    return w
def patch_class(cls):
    for name, fn in list(vars(cls).items()):
        if inspect.isfunction(fn) and (not name.startswith("__") or name == "__init__"):
            setattr(cls, name, wrap(fn, f"{cls.__name__}.{name}"))
for mod in (stage3, partitioned_param_coordinator, parameter_offload, partition_parameters, ds_engine):
    for _, cls in inspect.getmembers(mod, inspect.isclass):
        if cls.__module__ == mod.__name__:
            patch_class(cls)
for name in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast", "barrier", "new_group",
             "all_gather", "reduce_scatter", "_all_gather_base", "_reduce_scatter_base"):
    if hasattr(tdist, name):
        setattr(tdist, name, wrap(getattr(tdist, name), f"torch.distributed.{name}"))
for name in ("isinf", "isnan"):
    setattr(torch, name, wrap(getattr(torch, name), f"torch.{name}"))
torch.Tensor.any = wrap(torch.Tensor.any, "Tensor.any")
torch.Tensor.item = wrap(torch.Tensor.item, "Tensor.item")
sys.argv = ["ds_peer.py"] + sys.argv[1:]
runpy.run_path("bench/deepspeed/ds_peer.py", run_name="__main__")
