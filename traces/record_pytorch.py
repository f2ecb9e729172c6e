#!/usr/bin/env python3
"""Record a deftsim gradient trace (traces/FORMAT.md) from real data-parallel PyTorch training.

Simulated data parallelism (default): one model, P workers. Each step the global batch is cut
into P shards; every worker's gradient is computed on its own shard from the same weights (in
synchronous data-parallel SGD every replica holds the same weights), the recorder stores the P
gradients, and the optimizer steps on their average: the update DDP would apply.

    python3 traces/record_pytorch.py --model resnet18 --dataset cifar10 --data ~/data \\
        --workers 4 --batch 512 --steps 300 --record 0,100,200,299 --seed 1 -o my-trace

Real torch.distributed, per-rank layout (--ddp, under torchrun): every rank computes its own
gradient with DDP's allreduce held back (`with model.no_sync(): loss.backward()`), saves it
itself as iter_<t>/rank_<r>.safetensors ({parameter name: gradient}, no gather), then the
ranks allreduce and step as DDP would. deftsim reads the folder as it is; `deftsim trace
import DIR` adds a manifest.

    torchrun --nproc-per-node 4 traces/record_pytorch.py --ddp --model resnet18 \\
        --dataset cifar10 --data ~/data --batch 512 --steps 300 --record 0,100,200,299 -o my-trace

In your own training loop: `w = RankWriter(dir, dist.get_rank(), dist.get_world_size())`,
then after backward `w.put(step, named_grads(model))`.

Needs torch (and torchvision for the image models); the writers alone need only numpy and
safetensors. deftsim itself needs none of this.
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


class RankWriter:
    """One rank's writer of the per-rank layout (traces/FORMAT.md): iter_<t>/rank_<r>.safetensors,
    written by this rank alone, atomically (a temporary name, then a rename). No manifest: the
    files say everything (`deftsim trace import DIR` writes one)."""

    def __init__(self, out_dir, rank, world_size, model_name=None, provenance=None):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside [0, {world_size})")
        self.dir, self.rank, self.world_size = out_dir, int(rank), int(world_size)
        self.meta = {"format": "deftsim-trace", "format_version": "2", "layout": "per-rank",
                     "rank": str(self.rank), "world_size": str(self.world_size)}
        if model_name:
            self.meta["model"] = str(model_name)
        for key in ("recorder", "method", "seed"):
            if provenance and provenance.get(key) is not None:
                self.meta[key] = str(provenance[key])
        self.iterations = []

    def path(self, iteration):
        return os.path.join(self.dir, f"iter_{iteration:06d}", f"rank_{self.rank:04d}.safetensors")

    def put(self, iteration, grads):
        """grads: {parameter name: gradient} in parameter order (a dict keeps insertion order),
        NumPy arrays or torch tensors; float32, float16 or bfloat16 (torch) are kept as they are
        and deftsim converts the 16-bit ones exactly. The order goes into the file's metadata
        (safetensors sorts the tensors by name)."""
        if self.iterations and iteration <= self.iterations[-1]:
            raise ValueError("iteration ids must strictly increase")
        if not grads:
            raise ValueError("no gradients")
        meta = dict(self.meta, iteration=str(int(iteration)),
                    parameter_order=json.dumps(list(grads)))
        path = self.path(int(iteration))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if any(type(v).__module__.startswith("torch") for v in grads.values()):
            from safetensors.torch import save_file as save_torch
            save_torch({n: g.detach().contiguous().cpu() for n, g in grads.items()}, path + ".tmp",
                       metadata=meta)
        else:
            arrays = {n: np.asarray(g) for n, g in grads.items()}
            save_file({n: g if g.flags.c_contiguous else g.copy(order="C")  # keeps shape ()
                       for n, g in arrays.items()}, path + ".tmp", metadata=meta)
        os.replace(path + ".tmp", path)
        self.iterations.append(int(iteration))


def named_grads(model):
    """{name: gradient} of every trainable parameter, in parameter order (zeros where a
    parameter got no gradient); a DDP wrapper is looked through, so names carry no 'module.'."""
    import torch
    from torch.nn.parallel import DistributedDataParallel
    if isinstance(model, DistributedDataParallel):
        model = model.module
    return {n: (p.grad if p.grad is not None else torch.zeros_like(p)).detach()
            for n, p in model.named_parameters() if p.requires_grad}


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


def fashion_mnist_cifar(folder, limit=None):
    """Fashion-MNIST's training images (the IDX files Debian's dataset-fashion-mnist installs
    under /usr/share/datasets/fashion-mnist) as CIFAR-style inputs: 28x28 zero-padded to 32x32,
    the grey channel repeated three times, normalised with the set's mean and standard
    deviation."""
    import gzip
    import torch
    with gzip.open(os.path.join(folder, "train-images-idx3-ubyte.gz")) as f:
        raw = f.read()
    n, rows, cols = (int.from_bytes(raw[i:i + 4], "big") for i in (4, 8, 12))
    img = np.frombuffer(raw, np.uint8, n * rows * cols, 16).reshape(n, rows, cols)
    with gzip.open(os.path.join(folder, "train-labels-idx1-ubyte.gz")) as f:
        lab = np.frombuffer(f.read(), np.uint8, n, 8)
    if limit:
        img, lab = img[:limit], lab[:limit]
    x = torch.from_numpy(img.astype(np.float32) / 255.0)
    x = (x - 0.2860) / 0.3530
    x = torch.nn.functional.pad(x, (2, 2, 2, 2), value=float((0 - 0.2860) / 0.3530))
    x = x[:, None].expand(-1, 3, -1, -1).contiguous()
    return torch.utils.data.TensorDataset(x, torch.from_numpy(lab.astype(np.int64)))


def resnet18_cifar(classes=10):
    """ResNet-18 with the CIFAR stem (3x3 convolution, stride 1, no max-pooling), named as the
    built-in table resnet18_cifar10 (conv1, bn1, layerN.M.convK/bnK, layerN.0.shortcut.0/1,
    linear), so its traces line up tensor by tensor with that table."""
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.shortcut = nn.Sequential()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                              nn.BatchNorm2d(cout))

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            cin, layers = 64, []
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                layers.append(nn.Sequential(Block(cin, cout, stride), Block(cout, cout, 1)))
                cin = cout
            self.layer1, self.layer2, self.layer3, self.layer4 = layers
            self.linear = nn.Linear(512, classes)

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
            return self.linear(F.adaptive_avg_pool2d(out, 1).flatten(1))

    return Net()


def build(args, world_size=1, rank=0):
    import torch
    if args.model == "bert_small":
        from bert_small import BertSmall, PydocPairs
        data = PydocPairs(args.seq_len, args.vocab, args.seed)
        model = BertSmall(len(data.vocab), args.hidden, args.layers, args.heads, args.seq_len)
        return model, torch.utils.data.DataLoader(data, batch_size=args.batch, shuffle=True,
                                                  drop_last=True)
    if args.dataset == "fashion-mnist":
        data = fashion_mnist_cifar(args.data if args.data != "data"
                                   else "/usr/share/datasets/fashion-mnist")
        model = resnet18_cifar(10) if args.model == "resnet18_cifar" else None
        if model is None:
            import torchvision
            model = getattr(torchvision.models, args.model)(num_classes=10)
        gen = torch.Generator().manual_seed(args.seed)
        return model, torch.utils.data.DataLoader(data, batch_size=args.batch, shuffle=True,
                                                  drop_last=True, generator=gen)
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
    model = (resnet18_cifar(classes) if args.model == "resnet18_cifar"
             else getattr(torchvision.models, args.model)(num_classes=classes))
    if world_size == 1:
        loader = torch.utils.data.DataLoader(data, batch_size=args.batch, shuffle=True,
                                             drop_last=True, num_workers=2)
    else:  # each rank its own shard of every global batch
        sampler = torch.utils.data.distributed.DistributedSampler(
            data, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
        loader = torch.utils.data.DataLoader(data, batch_size=args.batch // world_size,
                                             sampler=sampler, drop_last=True, num_workers=2)
    return model, loader


def main_ddp(args):
    """torchrun mode: each rank records its own gradients (RankWriter), no gather."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    cuda = torch.cuda.is_available()
    dist.init_process_group(backend="nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} must be a multiple of the {world} ranks")
    local = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device(f"cuda:{local}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(args.seed)  # the same initial weights everywhere (DDP broadcasts too)
    model, loader = build(args, world, rank)
    model.to(device).train()
    ddp = DDP(model, device_ids=[local] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    record = {int(s) for s in args.record.split(",")}
    prov = {"recorder": f"traces/record_pytorch.py --ddp (torch {torch.__version__})",
            "method": f"torch.distributed DDP: {args.model} on {args.dataset}, global batch "
                      f"{args.batch} over {world} ranks, lr {args.lr}, momentum 0.9, weight decay "
                      f"5e-4, each rank's gradient before the allreduce", "seed": args.seed}
    writer = RankWriter(args.output, rank, world, args.model, prov)
    params = [p for p in model.parameters() if p.requires_grad]
    step, epoch = 0, 0
    while step < args.steps:
        loader.sampler.set_epoch(epoch)
        epoch += 1
        for x, y in loader:
            if step >= args.steps:
                break
            x, y = x.to(device), y.to(device)
            opt.zero_grad(set_to_none=True)
            with ddp.no_sync():  # the local gradient only: DDP's allreduce held back
                torch.nn.functional.cross_entropy(ddp(x), y).backward()
            if step in record:
                writer.put(step, named_grads(ddp))
            for p in params:  # what DDP's allreduce would deliver: the mean over ranks
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                dist.all_reduce(p.grad)
                p.grad /= world
            opt.step()
            step += 1
    dist.barrier()
    if rank == 0:
        print(f"{args.output}: {len(writer.iterations)} iterations x {world} ranks "
              f"(iter_<t>/rank_<r>.safetensors; 'deftsim trace import {args.output}' adds a "
              f"manifest)")
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18",
                    help="a torchvision.models constructor, resnet18_cifar (ResNet-18 with the "
                         "CIFAR stem, named as the table resnet18_cifar10) or bert_small (a "
                         "BERT-style encoder, traces/bert_small.py, on Python's own pydoc text)")
    ap.add_argument("--dataset", default="cifar10", choices=["cifar10", "fashion-mnist", "random"])
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's choice)")
    ap.add_argument("--seq-len", type=int, default=64, help="bert_small: tokens per sequence")
    ap.add_argument("--vocab", type=int, default=2000, help="bert_small: most frequent words kept")
    ap.add_argument("--hidden", type=int, default=128, help="bert_small: hidden size")
    ap.add_argument("--layers", type=int, default=4, help="bert_small: encoder layers")
    ap.add_argument("--heads", type=int, default=4, help="bert_small: attention heads")
    ap.add_argument("--data", default="data", help="dataset directory")
    ap.add_argument("--download", action="store_true")
    ap.add_argument("--workers", type=int, default=4, help="simulated data-parallel workers P")
    ap.add_argument("--batch", type=int, default=512, help="global batch (P shards)")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--record", default="0", help="comma-separated steps to record")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ddp", action="store_true",
                    help="run under torchrun: every rank writes iter_<t>/rank_<r>.safetensors "
                         "itself (--workers is ignored: the world size is torchrun's)")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    if args.ddp:
        return main_ddp(args)
    if args.batch % args.workers:
        ap.error("--batch must be a multiple of --workers")

    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, loader = build(args)
    model.to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    record = sorted({int(s) for s in args.record.split(",")})
    data_name = "Python's pydoc_data.topics text (masked words and next-half pairs)" \
        if args.model == "bert_small" else args.dataset
    prov = {"recorder": f"traces/record_pytorch.py (torch {torch.__version__})",
            "method": f"simulated data-parallel SGD: {args.model} on {data_name}, global batch "
                      f"{args.batch} cut into {args.workers} shards, lr {args.lr}, momentum 0.9, "
                      f"weight decay 5e-4, gradients before averaging (weight decay excluded)",
            "seed": args.seed, "device": device}
    writer = TraceWriter(args.output, args.model, layer_table(model), args.workers, prov)
    last = max(record)
    if args.steps <= last:
        ap.error(f"--steps {args.steps} ends before the recorded step {last}")
    params = [p for p in model.parameters() if p.requires_grad]
    step, batches = 0, iter(loader)
    while step < args.steps:
        try:
            x, y = next(batches)
        except StopIteration:
            batches = iter(loader)
            continue
        x, y = x.to(device), y.to(device)
        if step > last:
            break
        grads, losses = [], []
        # Batch norm statistics update once per shard, as on P replicas.
        for xs, ys in zip(x.chunk(args.workers), y.chunk(args.workers)):
            model.zero_grad(set_to_none=True)
            loss = model.loss(xs, ys) if hasattr(model, "loss") else \
                torch.nn.functional.cross_entropy(model(xs), ys)
            loss.backward()
            losses.append(float(loss))
            grads.append(flat_grad(model))
        if step in record or step % 20 == 0:
            print(f"step {step}: mean loss over the workers {np.mean(losses):.4f}", flush=True)
        if not np.isfinite(np.mean(losses)):
            raise SystemExit(f"step {step}: the loss is not finite; try a smaller --lr")
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
