#!/usr/bin/env python3
"""Record a deftsim gradient trace (traces/FORMAT.md) from real data-parallel PyTorch training.

Simulated data parallelism (default): one model, P workers. Each step the global batch is cut
into P shards; every worker's gradient is computed on its own shard from the same weights (in
synchronous data-parallel SGD every replica holds the same weights), the recorder stores the P
gradients, and the optimizer steps on their average: the update DDP would apply.

    python3 traces/record_pytorch.py --model resnet18 --dataset cifar10 --data ~/data \\
        --workers 4 --batch 512 --steps 300 --record 0,100,200,299 --seed 1 -o my-trace

Real torch.distributed (torchrun --nproc-per-node P ...): compute the local gradient with
DDP's allreduce disabled (`with model.no_sync(): loss.backward()`), call
`gather_to_rank0(flat_grad(model))`, let rank 0 `put` the list, then allreduce yourself
(or run a step without no_sync). Needs torch (and torchvision for the image models); the
writer alone needs only numpy and safetensors. deftsim itself needs none of this.
"""
import argparse
import json
import os

import numpy as np
from safetensors.numpy import save_file


class TraceWriter:
    """Writes a trace directory; every file appears atomically, the manifest last."""

    def __init__(self, out_dir, model_name, layers, workers, provenance):
        self.dir, self.model_name, self.workers = out_dir, model_name, workers
        self.layers = [{"name": n, "shape": [int(d) for d in s] or [1]} for n, s in layers]
        self.numel = sum(int(np.prod(L["shape"])) for L in self.layers)
        for key in ("recorder", "method", "seed"):
            if key not in provenance:
                raise ValueError(f"provenance needs '{key}'")
        self.provenance, self.iterations = provenance, []
        os.makedirs(out_dir, exist_ok=True)
        manifest = os.path.join(out_dir, "manifest.json")
        if os.path.exists(manifest):  # not a valid trace until close()
            os.remove(manifest)

    def put(self, iteration, grads):
        """grads: one float32 vector of numel elements per worker, in parameter order."""
        if self.iterations and iteration <= self.iterations[-1]:
            raise ValueError("iteration ids must strictly increase")
        if len(grads) != self.workers:
            raise ValueError(f"{len(grads)} gradients for {self.workers} workers")
        tensors = {}
        for w, g in enumerate(grads):
            g = np.ascontiguousarray(g, dtype=np.float32).reshape(-1)
            if g.size != self.numel:
                raise ValueError(f"worker {w}: {g.size} elements, the model has {self.numel}")
            tensors[f"worker.{w:04d}"] = g
        path = os.path.join(self.dir, f"iter_{iteration:06d}.safetensors")
        meta = {"format": "deftsim-trace", "format_version": "1", "model": self.model_name,
                "iteration": str(iteration), "workers": str(self.workers)}
        save_file(tensors, path + ".tmp", metadata=meta)
        os.replace(path + ".tmp", path)
        self.iterations.append(int(iteration))

    def close(self):
        if not self.iterations:
            raise ValueError("no iteration recorded")
        manifest = {"format": "deftsim-trace", "format_version": 1,
                    "model": {"name": self.model_name, "numel": self.numel, "layers": self.layers},
                    "workers": self.workers, "dtype": "float32", "iterations": self.iterations,
                    "provenance": self.provenance}
        path = os.path.join(self.dir, "manifest.json")
        with open(path + ".tmp", "w") as f:
            json.dump(manifest, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)


def layer_table(model):
    """(name, shape) of every trainable parameter, in parameter order."""
    return [(n, tuple(p.shape)) for n, p in model.named_parameters() if p.requires_grad]


def flat_grad(model):
    """The model's gradient as one float32 vector in parameter order (zeros where unused)."""
    import torch
    parts = [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
             for p in model.parameters() if p.requires_grad]
    return torch.cat(parts).detach().float()


def gather_to_rank0(vec):
    """torch.distributed: every rank's vector, as numpy arrays on rank 0 (None elsewhere)."""
    import torch.distributed as dist
    world, rank = dist.get_world_size(), dist.get_rank()
    out = [vec.clone() for _ in range(world)] if rank == 0 else None
    dist.gather(vec, out, dst=0)
    return [v.cpu().numpy() for v in out] if rank == 0 else None


def build(args):
    import torch
    import torchvision
    import torchvision.transforms as T
    if args.dataset == "cifar10":
        tf = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(),
                        T.Normalize((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))])
        data = torchvision.datasets.CIFAR10(args.data, train=True, download=args.download,
                                            transform=tf)
        classes = 10
    else:  # random images: a smoke test of the recorder, not a gradient worth studying
        data = torch.utils.data.TensorDataset(torch.randn(4096, 3, 32, 32),
                                              torch.randint(0, 10, (4096,)))
        classes = 10
    model = getattr(torchvision.models, args.model)(num_classes=classes)
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch, shuffle=True,
                                         drop_last=True, num_workers=2)
    return model, loader


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18", help="a torchvision.models constructor")
    ap.add_argument("--dataset", default="cifar10", choices=["cifar10", "random"])
    ap.add_argument("--data", default="data", help="dataset directory")
    ap.add_argument("--download", action="store_true")
    ap.add_argument("--workers", type=int, default=4, help="simulated data-parallel workers P")
    ap.add_argument("--batch", type=int, default=512, help="global batch (P shards)")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--record", default="0", help="comma-separated steps to record")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    if args.batch % args.workers:
        ap.error("--batch must be a multiple of --workers")

    import torch
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, loader = build(args)
    model.to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    record = sorted({int(s) for s in args.record.split(",")})
    prov = {"recorder": f"traces/record_pytorch.py (torch {torch.__version__})",
            "method": f"simulated data-parallel SGD: {args.model} on {args.dataset}, global batch "
                      f"{args.batch} cut into {args.workers} shards, lr {args.lr}, momentum 0.9, "
                      f"weight decay 5e-4, gradients before averaging (weight decay excluded)",
            "seed": args.seed, "device": device}
    writer = TraceWriter(args.output, args.model, layer_table(model), args.workers, prov)
    params = [p for p in model.parameters() if p.requires_grad]
    step, batches = 0, iter(loader)
    while step < args.steps:
        try:
            x, y = next(batches)
        except StopIteration:
            batches = iter(loader)
            continue
        x, y = x.to(device), y.to(device)
        grads = []
        # Batch norm statistics update once per shard, as on P replicas.
        for xs, ys in zip(x.chunk(args.workers), y.chunk(args.workers)):
            model.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(xs), ys).backward()
            grads.append(flat_grad(model))
        if step in record:
            writer.put(step, [g.cpu().numpy() for g in grads])
        mean = torch.stack(grads).mean(0)
        at = 0
        for p in params:  # the averaged gradient: what allreduce would deliver
            p.grad = mean[at:at + p.numel()].view_as(p).to(p.dtype)
            at += p.numel()
        opt.step()
        step += 1
    writer.close()
    print(f"{args.output}: {len(writer.iterations)} iterations x {args.workers} workers x "
          f"{writer.numel} elements")


if __name__ == "__main__":
    main()
