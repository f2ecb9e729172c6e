#!/usr/bin/env python3
"""Measures the forward and the backward pass of deftsim's model tables on this GPU with
PyTorch and writes rows for a `[compute] table` (docs/COMPUTE.md).

    compute_times.py [--models resnet18_cifar10,bert_base_uncased] [--precisions fp32,bf16]
                     [--steps 30] [--warmup 10] [--out FILE] [--device cuda|cpu]

For each model and precision the script builds the network whose parameters are the model
table's (traces/models/MODEL.csv: the same names, shapes and order, checked before timing),
runs `--warmup` training steps and then `--steps` more, and times each step's forward pass
(the model and the loss) and backward pass (`loss.backward()`) apart with CUDA events. The
optimizer step (SGD with momentum) runs after them, untimed in the row, and is printed. A row's
figures are the medians over the timed steps.

- resnet18_cifar10: the CIFAR-10 ResNet-18 (a 3x3 stem, four stages of two basic blocks, 1x1
  shortcuts), a batch of `--resnet-batch` (128) random 3x32x32 images, cross-entropy loss.
- bert_base_uncased: BERT-base (12 layers, hidden 768, 12 heads, intermediate 3072, GELU,
  dropout 0.1 where BERT has it, a pooler),
  a batch of `--bert-batch` (32) random sequences of `--bert-seq` (128) tokens, and a span
  head of 768 x 2 on the sequence output with the start and end cross-entropy of SQuAD
  fine-tuning. The head's 1,538 parameters are not in the table; they are timed with the rest.

fp32 runs with PyTorch's defaults on this device (cuDNN may use TF32 for convolutions; the
script prints torch.backends' settings); bf16 runs the forward pass under
torch.autocast(dtype=torch.bfloat16). The device column is the GPU's name with the
precision, e.g. `nvidia_h200_bf16`.

The rows go to FILE (default: stdout) with the header of traces/compute.csv; their source
cell names this script, the commit, the GPU, the PyTorch and CUDA versions and the date. A
user adds them to a table of their own, or to traces/compute.csv with docs/COMPUTE.md's
paragraph on where they come from.

--device cpu times on the CPU with time.perf_counter (a check of the script, not a figure
for a GPU cluster). Exit status 77 when PyTorch is missing or no CUDA device is usable.
"""
import argparse
import csv
import datetime
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def table_params(model):
    path = os.path.join(ROOT, "traces", "models", model + ".csv")
    with open(path) as f:
        return [(r["name"], tuple(int(x) for x in r["shape"].split("x"))) for r in csv.DictReader(f)]


def build_resnet18_cifar10(nn):
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
            y = nn.functional.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return nn.functional.relu(y + self.shortcut(x))

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            cin, stages = 64, []
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                stages.append(nn.Sequential(Block(cin, cout, stride), Block(cout, cout, 1)))
                cin = cout
            self.layer1, self.layer2, self.layer3, self.layer4 = stages
            self.linear = nn.Linear(512, 10)

        def forward(self, x):
            y = nn.functional.relu(self.bn1(self.conv1(x)))
            y = self.layer4(self.layer3(self.layer2(self.layer1(y))))
            y = nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)
            return self.linear(y)

    return ResNet18()


def build_bert_base(nn, torch):
    H, NH, I, L, V, POS = 768, 12, 3072, 12, 30522, 512

    def drop(t):
        return nn.functional.dropout(t, 0.1, training=True)

    class Embeddings(nn.Module):
        def __init__(self):
            super().__init__()
            self.word_embeddings = nn.Embedding(V, H)
            self.position_embeddings = nn.Embedding(POS, H)
            self.token_type_embeddings = nn.Embedding(2, H)
            self.LayerNorm = nn.LayerNorm(H, eps=1e-12)

        def forward(self, ids, types):
            pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
            e = self.word_embeddings(ids) + self.position_embeddings(pos)
            return drop(self.LayerNorm(e + self.token_type_embeddings(types)))

    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.query, self.key, self.value = nn.Linear(H, H), nn.Linear(H, H), nn.Linear(H, H)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = (t(x).view(b, s, NH, H // NH).transpose(1, 2)
                       for t in (self.query, self.key, self.value))
            a = drop(torch.softmax(q @ k.transpose(-1, -2) / (H // NH) ** 0.5, dim=-1))
            return (a @ v).transpose(1, 2).reshape(b, s, H)

    class DenseNorm(nn.Module):
        def __init__(self, cin):
            super().__init__()
            self.dense = nn.Linear(cin, H)
            self.LayerNorm = nn.LayerNorm(H, eps=1e-12)

        def forward(self, x, residual):
            return self.LayerNorm(drop(self.dense(x)) + residual)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.self = SelfAttention()
            self.output = DenseNorm(H)

        def forward(self, x):
            return self.output(self.self(x), x)

    class Intermediate(nn.Module):
        def __init__(self):
            super().__init__()
            self.dense = nn.Linear(H, I)

        def forward(self, x):
            return nn.functional.gelu(self.dense(x))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = Attention()
            self.intermediate = Intermediate()
            self.output = DenseNorm(I)

        def forward(self, x):
            a = self.attention(x)
            return self.output(self.intermediate(a), a)

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.ModuleList(Layer() for _ in range(L))

        def forward(self, x):
            for lay in self.layer:
                x = lay(x)
            return x

    class Pooler(nn.Module):
        def __init__(self):
            super().__init__()
            self.dense = nn.Linear(H, H)

        def forward(self, x):
            return torch.tanh(self.dense(x[:, 0]))

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.embeddings = Embeddings()
            self.encoder = Encoder()
            self.pooler = Pooler()

        def forward(self, ids, types):
            seq = self.encoder(self.embeddings(ids, types))
            return seq, self.pooler(seq)

    return Bert()


def check_params(model, name):
    got = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    want = table_params(name)
    if got != want:
        for i, (g, w) in enumerate(zip(got, want)):
            if g != w:
                sys.exit(f"compute_times.py: {name}: parameter {i} is {g}, the table has {w}")
        sys.exit(f"compute_times.py: {name}: {len(got)} parameters, the table has {len(want)}")
    return sum(p.numel() for p in model.parameters())


def slug(s):
    return re.sub(r"[^a-z0-9]+", "_", s.lower()).strip("_")


def git_commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet18_cifar10,bert_base_uncased")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--resnet-batch", type=int, default=128)
    ap.add_argument("--bert-batch", type=int, default=32)
    ap.add_argument("--bert-seq", type=int, default=128)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out")
    a = ap.parse_args()
    try:
        import torch
        import torch.nn as nn
    except ImportError:
        print("compute_times.py: PyTorch is not installed", file=sys.stderr)
        return 77
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("compute_times.py: no usable CUDA device", file=sys.stderr)
        return 77
    dev = torch.device(a.device)
    gpu = torch.cuda.get_device_name(0) if cuda else "cpu"
    torch.manual_seed(a.seed)
    print(f"compute_times.py: {gpu}; torch {torch.__version__}, CUDA {torch.version.cuda}; "
          f"cudnn.allow_tf32 {torch.backends.cudnn.allow_tf32}, "
          f"cuda.matmul.allow_tf32 {torch.backends.cuda.matmul.allow_tf32}; seed {a.seed}",
          file=sys.stderr)

    def timer():
        if cuda:
            return torch.cuda.Event(enable_timing=True)
        return None

    rows = []
    date = datetime.date.today().isoformat()
    for name in a.models.split(","):
        for prec in a.precisions.split(","):
            if name == "resnet18_cifar10":
                model = build_resnet18_cifar10(nn)
                batch = a.resnet_batch
                x = torch.randn(batch, 3, 32, 32, device=dev)
                y = torch.randint(0, 10, (batch,), device=dev)
                head = None
                what = f"batch {batch} of 3x32x32"
            elif name == "bert_base_uncased":
                model = build_bert_base(nn, torch)
                batch = a.bert_batch
                ids = torch.randint(0, 30522, (batch, a.bert_seq), device=dev)
                types = torch.zeros_like(ids)
                head = nn.Linear(768, 2).to(dev)
                starts = torch.randint(0, a.bert_seq, (batch,), device=dev)
                ends = torch.randint(0, a.bert_seq, (batch,), device=dev)
                what = f"batch {batch} of {a.bert_seq} tokens; span head"
            else:
                sys.exit(f"compute_times.py: --models: no model '{name}' "
                         "(resnet18_cifar10, bert_base_uncased)")
            numel = check_params(model, name)
            model.to(dev).train()
            params = list(model.parameters()) + (list(head.parameters()) if head else [])
            opt = torch.optim.SGD(params, lr=1e-3, momentum=0.9)
            if prec == "bf16":
                ctx = lambda: torch.autocast(device_type=a.device, dtype=torch.bfloat16)
            elif prec == "fp32":
                import contextlib
                ctx = contextlib.nullcontext
            else:
                sys.exit(f"compute_times.py: --precisions: no precision '{prec}' (fp32, bf16)")

            def loss_fn():
                with ctx():
                    if head is None:
                        return nn.functional.cross_entropy(model(x), y)
                    seq, _ = model(ids, types)
                    logits = head(seq).float()
                    return (nn.functional.cross_entropy(logits[..., 0], starts) +
                            nn.functional.cross_entropy(logits[..., 1], ends)) / 2

            fwd, bwd, step = [], [], []
            for it in range(a.warmup + a.steps):
                opt.zero_grad(set_to_none=True)
                if cuda:
                    e = [timer() for _ in range(4)]
                    e[0].record()
                    loss = loss_fn()
                    e[1].record()
                    loss.backward()
                    e[2].record()
                    opt.step()
                    e[3].record()
                    torch.cuda.synchronize()
                    t = [e[0].elapsed_time(e[1]), e[1].elapsed_time(e[2]), e[2].elapsed_time(e[3])]
                else:
                    t0 = time.perf_counter()
                    loss = loss_fn()
                    t1 = time.perf_counter()
                    loss.backward()
                    t2 = time.perf_counter()
                    opt.step()
                    t3 = time.perf_counter()
                    t = [(t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3]
                if it >= a.warmup:
                    fwd.append(t[0])
                    bwd.append(t[1])
                    step.append(t[2])
            f, b, s = (statistics.median(v) for v in (fwd, bwd, step))
            device = slug(gpu) + "_" + prec
            print(f"{name} {device}: {numel} parameters ({what}); forward {f:.3f} ms, "
                  f"backward {b:.3f} ms, optimizer {s:.3f} ms (medians of {a.steps} steps after "
                  f"{a.warmup}; forward range {min(fwd):.3f}..{max(fwd):.3f}, backward "
                  f"{min(bwd):.3f}..{max(bwd):.3f}); loss {loss.item():.4f}", file=sys.stderr)
            source = (f"measured by tests/gpu/compute_times.py at {git_commit()} on {gpu} "
                      f"({prec}; {what}; torch {torch.__version__}; CUDA {torch.version.cuda}; "
                      f"{date}): medians of {a.steps} steps after {a.warmup}; SGD step "
                      f"{s:.3f} ms not included").replace(",", ";")
            rows.append([name, device, batch, f"{f:.3f}", f"{b:.3f}", source])
            del model, opt, params
            if cuda:
                torch.cuda.empty_cache()
    out = open(a.out, "w", newline="") if a.out else sys.stdout
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["model", "device", "batch", "forward_ms", "backward_ms", "source"])
    w.writerows(rows)
    if a.out:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
